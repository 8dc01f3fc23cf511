"""Hook specifications: the ways a plugin contributes parts to ShardMeter.

Every hook takes no arguments and returns (or yields) records with a unique
``name``. pluggy calls every registered implementation and the registry
collects all results; a name contributed twice is an error that names both
providers. Implement a hook with ``@shardmeter.hookimpl``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # records are named in the signatures only
    from shardmeter.parts import (
        ConvergencePart,
        FailurePart,
        FrameworkPart,
        SchedulePart,
        ShardingPart,
        SyncPart,
        VariabilityPart,
    )
    from shardmeter.records import (
        CostSource,
        HardwareProfile,
        Interconnect,
        PipelineSchedule,
        ShardingStrategy,
        SyncStrategy,
    )

PROJECT = "shardmeter"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def shardmeter_hardware_profiles() -> Iterable[HardwareProfile]:
    """Contribute accelerator profiles.

    :returns: an iterable of :class:`shardmeter.HardwareProfile`.

    Called once per plugin manager; all implementations are called and their
    results concatenated. A profile's ``name`` is what scenarios write as
    ``gpu = "..."``.

    Example::

        @shardmeter.hookimpl
        def shardmeter_hardware_profiles():
            yield shardmeter.HardwareProfile(
                name="acme-x1", memory_gb=96.0, memory_bandwidth_gb_s=3000.0,
                peak_tflops={"bf16": 500.0, "fp8": 1000.0})
    """


@hookspec
def shardmeter_interconnect_models() -> Iterable[Interconnect]:
    """Contribute link technologies (NVLink, InfiniBand, Ethernet, Internet, ...).

    :returns: an iterable of :class:`shardmeter.Interconnect`.

    Called once per plugin manager; all results are collected. A link's
    ``name`` is what scenarios write as ``intra_node``, ``inter_node`` or
    ``[network].link``.

    Example::

        @shardmeter.hookimpl
        def shardmeter_interconnect_models():
            yield shardmeter.Interconnect(
                name="acme-link", bandwidth_gb_s=200.0, latency_us=3.0, kind="network")
    """


@hookspec
def shardmeter_sharding_strategies() -> Iterable[ShardingPart | ShardingStrategy]:
    """Contribute sharding strategies (how model state is split over the data-parallel group).

    :returns: an iterable of :class:`shardmeter.ShardingPart` subclasses' instances (behaviour:
        ``state()`` and ``traffic()``), or declarative :class:`shardmeter.ShardingStrategy`
        records (sugar for the bundled ZeRO family with those flags).

    Called once per plugin manager; all results are collected. A strategy's ``name`` is what
    scenarios write as ``[parallelism] sharding``; its ``options`` class declares the extra
    ``[parallelism]`` keys it reads. Until the next release this hook also accepts pipeline
    schedules and sync strategies, with a ``DeprecationWarning``: yield those from
    :func:`shardmeter_pipeline_schedules` and :func:`shardmeter_sync_strategies`.

    Example::

        @shardmeter.hookimpl
        def shardmeter_sharding_strategies():
            yield shardmeter.ShardingStrategy(
                name="acme-zero2", shard_optimizer=True, shard_gradients=True)
    """


@hookspec
def shardmeter_pipeline_schedules() -> Iterable[SchedulePart | PipelineSchedule]:
    """Contribute pipeline-parallel schedules.

    :returns: an iterable of :class:`shardmeter.SchedulePart` instances (behaviour:
        ``terms()`` returns the bubble, micro-batches in flight and point-to-point transfers),
        or declarative :class:`shardmeter.PipelineSchedule` records.

    Called once per plugin manager; all results are collected. A schedule's ``name`` is what
    scenarios write as ``[parallelism] schedule``.

    Example::

        @shardmeter.hookimpl
        def shardmeter_pipeline_schedules():
            yield shardmeter.PipelineSchedule(name="half-bubble", bubble_fraction=0.5)
    """


@hookspec
def shardmeter_sync_strategies() -> Iterable[SyncPart | SyncStrategy]:
    """Contribute strategies that synchronise islands (two islands or more).

    :returns: an iterable of :class:`shardmeter.SyncPart` instances (behaviour:
        ``exchange()`` returns the exposed cross-island time and bytes), or declarative
        :class:`shardmeter.SyncStrategy` records.

    Called once per plugin manager; all results are collected. A strategy's ``name`` is what
    scenarios write as ``[sync] strategy``; its ``options`` are the ``[sync]`` keys it reads.

    Example::

        @shardmeter.hookimpl
        def shardmeter_sync_strategies():
            yield shardmeter.SyncStrategy(
                name="acme-diloco", local_steps=True, options={"inner_steps": 100})
    """


@hookspec
def shardmeter_cost_sources() -> Iterable[CostSource]:
    """Contribute price sources for GPU time and egress traffic.

    :returns: an iterable of :class:`shardmeter.CostSource`.

    Called once per plugin manager; all results are collected. A cost
    source's ``name`` is what scenarios write as ``price = "..."``.

    Example::

        @shardmeter.hookimpl
        def shardmeter_cost_sources():
            yield shardmeter.CostSource(
                name="acme-cloud", gpu_prices={"acme-x1": 3.10}, date="2026-11")
    """


@hookspec
def shardmeter_convergence_models() -> Iterable[ConvergencePart]:
    """Contribute convergence models (the tokens a sync strategy needs to reach a given loss).

    :returns: an iterable of :class:`shardmeter.parts.ConvergencePart` instances (behaviour:
        ``terms()`` returns, per plan, the tokens factor over data-parallel training and whether
        the plan lies in the model's validity range; ``validity()`` the ranges).

    Called once per plugin manager; all results are collected. A model's ``name`` is what
    scenarios write as ``[sync] convergence``; without one, convergence is not priced.

    Example::

        @shardmeter.hookimpl
        def shardmeter_convergence_models():
            yield AcmeConvergence(name="acme-fit", source="Acme 2026, Table 3")
    """


@hookspec
def shardmeter_frameworks() -> Iterable[FrameworkPart]:
    """Contribute software-stack profiles (``training.framework``).

    :returns: an iterable of :class:`shardmeter.FrameworkPart` instances (behaviour:
        ``defaults(tables, gpus)`` returns the ``training.*`` and ``parallelism.*`` values the
        stack uses when its user writes nothing, each with its source).

    Called once per plugin manager; all results are collected. A profile's ``name`` is what
    scenarios write as ``[training] framework``; keys the scenario writes always win, and the
    report's notes list every value the profile set (``docs/frameworks.md``).

    Example::

        @shardmeter.hookimpl
        def shardmeter_frameworks():
            yield AcmeStack(name="acme-train", source="acme-train config.py@abc123")
    """


@hookspec
def shardmeter_failure_models() -> Iterable[FailurePart]:
    """Contribute failure models (how often a job is interrupted, how long a restart takes).

    :returns: an iterable of :class:`shardmeter.parts.FailurePart` instances (behaviour:
        ``terms()`` returns, per plan, the unexpected and planned interruptions per hour of the
        job and the restart time).

    Called once per plugin manager; all results are collected. A model's ``name`` is what
    scenarios write as ``[reliability] model``; its ``options`` are the ``[reliability]`` keys
    it reads (``docs/scenario.md``, "Failures, checkpoints and variability").

    Example::

        @shardmeter.hookimpl
        def shardmeter_failure_models():
            yield AcmeFleet(name="acme-fleet", source="Acme fleet study 2026, Table 2")
    """


@hookspec
def shardmeter_variability_models() -> Iterable[VariabilityPart]:
    """Contribute variability models (how one rank's time for a phase of a step varies).

    :returns: an iterable of :class:`shardmeter.parts.VariabilityPart` instances (behaviour:
        ``quantile_factor()`` returns the quantile of the slowest of N ranks over one rank's
        mean time).

    Called once per plugin manager; all results are collected. A model's ``name`` is what
    scenarios write as ``[variability] model``; its ``options`` are the ``[variability]`` keys
    it reads.

    Example::

        @shardmeter.hookimpl
        def shardmeter_variability_models():
            yield AcmeMeasured(name="acme-quantiles", source="Acme cluster calibration 2026")
    """

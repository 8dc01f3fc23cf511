"""Hook specifications: the four ways a plugin contributes parts to ShardMeter.

Every hook takes no arguments and returns (or yields) records with a unique
``name``. pluggy calls every registered implementation and the registry
collects all results; a name contributed twice is an error that names both
providers. Implement a hook with ``@shardmeter.hookimpl``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import pluggy

if TYPE_CHECKING:  # records are named in the signatures only
    from .records import (
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
def shardmeter_sharding_strategies() -> Iterable[ShardingStrategy | PipelineSchedule | SyncStrategy]:
    """Contribute strategies: sharding, pipeline schedules and island sync.

    :returns: an iterable of :class:`shardmeter.ShardingStrategy`,
        :class:`shardmeter.PipelineSchedule` or :class:`shardmeter.SyncStrategy`
        records (each kind has its own namespace of names).

    Called once per plugin manager; all results are collected. Names are what
    scenarios write as ``[parallelism] sharding``, ``schedule`` and
    ``[sync] strategy``. A strategy's ``options`` declare the extra keys it
    reads from ``[parallelism]`` (sharding, schedule) or ``[sync]``.

    Example::

        @shardmeter.hookimpl
        def shardmeter_sharding_strategies():
            yield shardmeter.ShardingStrategy(
                name="acme-zero2", shard_optimizer=True, shard_gradients=True)
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

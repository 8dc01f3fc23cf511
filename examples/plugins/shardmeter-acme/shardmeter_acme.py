"""shardmeter-acme: an example third-party ShardMeter plugin.

Registers, through the ``shardmeter`` entry-point group (see ``pyproject.toml``):

* the GPU ``acme-x1`` (a fictional accelerator: 96 GB of HBM at 3 TB/s,
  500 dense BF16 TFLOP/s, 1000 FP8 TFLOP/s, eight to a node on NVLink 4);
* the network link ``acme-link`` (a fictional 400 Gb/s NIC: 50 GB/s one
  direction per NIC, 4 us per algorithm step);
* the sharding strategy ``acme-zero2`` (ZeRO-2 with a tunable gradient bucket:
  the scenario key ``[parallelism] acme_bucket_mb``, default 25): a behaviour
  part, a subclass of the bundled :class:`~shardmeter.strategies.zero.ZeroSharding`
  that overrides one method, :meth:`AcmeZero2.bucket_bytes`;
* the cost source ``acme-cloud`` (a rental price for ``acme-x1``).

Every figure is made up for the example; a real plugin cites its datasheet in
each record's ``source``. Test it with :mod:`shardmeter.testing`::

    from shardmeter.testing import make_estimator
    import shardmeter_acme

    def test_bucket_option():
        est = make_estimator(shardmeter_acme)  # a fresh plugin manager beside the bundled parts
        sc = "acme-scenario.toml"
        small = est.estimate(sc, overrides=["parallelism.acme_bucket_mb=1"])
        large = est.estimate(sc, overrides=["parallelism.acme_bucket_mb=400"])
        assert small.step_time_s < large.step_time_s
"""

from __future__ import annotations

import attrs

import shardmeter
from shardmeter.strategies.zero import ZeroSharding

__version__ = "0.1.0"

_SOURCE = "fictional example figures (shardmeter-acme README)"


@shardmeter.hookimpl
def shardmeter_hardware_profiles():
    yield shardmeter.HardwareProfile(
        name="acme-x1",
        vendor="ACME",
        memory_gb=96.0,
        memory_bandwidth_gb_s=3000.0,
        peak_tflops={"bf16": 500.0, "fp16": 500.0, "fp8": 1000.0, "fp32": 60.0},
        matmul_efficiency=0.75,
        sm_count=120,
        tdp_w=600.0,
        gpus_per_node=8,
        intra_node="nvlink4",
        inter_node="acme-link",
        nics_per_node=8,
        source=_SOURCE,
    )


@shardmeter.hookimpl
def shardmeter_interconnect_models():
    yield shardmeter.Interconnect(
        name="acme-link",
        kind="network",
        bandwidth_gb_s=50.0,  # 400 Gb/s per NIC, one direction
        latency_us=4.0,
        efficiency=0.85,
        source=_SOURCE,
    )


@attrs.frozen(kw_only=True)
class AcmeZero2Options:
    """``[parallelism]`` keys ``acme-zero2`` reads: ``acme_bucket_mb``, the gradient bucket in
    megabytes (10^6 bytes; PyTorch DDP's ``bucket_cap_mb`` defaults to 25), at least 0 (its
    validator is the only rule: ShardMeter checks the type, the options class the value)."""

    acme_bucket_mb: float = attrs.field(default=25.0, validator=attrs.validators.ge(0.0))


@attrs.frozen(kw_only=True)
class AcmeZero2(ZeroSharding):
    """ZeRO-2 whose gradient bucket is a scenario option.

    ZeRO-2 (Rajbhandari et al. 2020, arXiv 1910.02054, Sec. 5.2 and 7) reduce-scatters the
    gradients and all-gathers the updated parameters, ``2 Psi`` bytes per GPU like an
    all-reduce, in buckets that overlap the backward pass (PyTorch DDP, Li et al. 2020,
    arXiv 2006.15704, Sec. 3.2). The last bucket is reduced after backward ends, so one
    bucket's collective, ``2 (n-1)/n * B / bandwidth + 2 (n-1) * latency`` over the ``n``
    data-parallel ranks, is exposed whatever the overlap: the core prices it from
    :meth:`bucket_bytes`, ``B = acme_bucket_mb * 1e6``. Everything else (state bytes,
    events) is the bundled ``zero2``'s.
    """

    options: type = AcmeZero2Options

    def bucket_bytes(self, opts: AcmeZero2Options) -> float:
        """The last gradient bucket, bytes: ``acme_bucket_mb * 1e6``."""
        return opts.acme_bucket_mb * 1e6


@shardmeter.hookimpl
def shardmeter_sharding_strategies():
    yield AcmeZero2(
        name="acme-zero2",
        shard_optimizer=True,
        shard_gradients=True,
        description="ZeRO-2 (optimizer states and gradients sharded over the data-parallel group) "
        "with gradients reduce-scattered in buckets of acme_bucket_mb megabytes; the last bucket "
        "is always exposed after the backward pass.",
        source="Rajbhandari et al. 2020, ZeRO (arXiv 1910.02054), Sec. 5; bucketing: Li et al. 2020, "
        "PyTorch Distributed (arXiv 2006.15704), Sec. 3.2",
    )


@shardmeter.hookimpl
def shardmeter_cost_sources():
    yield shardmeter.CostSource(
        name="acme-cloud",
        gpu_prices={"acme-x1": 2.50},
        egress_usd_per_gb=0.05,
        date="2026-11",
        source=_SOURCE,
    )

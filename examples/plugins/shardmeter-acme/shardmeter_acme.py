"""shardmeter-acme: an example third-party ShardMeter plugin.

Registers, through the ``shardmeter`` entry-point group (see ``pyproject.toml``):

* the GPU ``acme-x1`` (a fictional accelerator: 96 GB of HBM at 3 TB/s,
  500 dense BF16 TFLOP/s, 1000 FP8 TFLOP/s, eight to a node on NVLink 4);
* the network link ``acme-link`` (a fictional 400 Gb/s NIC: 50 GB/s one
  direction per NIC, 4 us per algorithm step);
* the sharding strategy ``acme-zero2`` (ZeRO-2 with a tunable gradient bucket:
  the scenario key ``[parallelism] acme_bucket_mb``, default 25);
* the cost source ``acme-cloud`` (a rental price for ``acme-x1``).

Every figure is made up for the example; a real plugin cites its datasheet in
each record's ``source``. Test it with :mod:`shardmeter.testing`::

    from shardmeter.testing import check_records
    import shardmeter_acme

    def test_records():
        check_records(shardmeter_acme)
"""

from __future__ import annotations

import shardmeter

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


@shardmeter.hookimpl
def shardmeter_sharding_strategies():
    yield shardmeter.ShardingStrategy(
        name="acme-zero2",
        shard_optimizer=True,
        shard_gradients=True,
        options={"acme_bucket_mb": 25},
        description="ZeRO-2 (optimizer states and gradients sharded over the data-parallel group) "
        "with gradients reduce-scattered in buckets of acme_bucket_mb megabytes.",
        source="Rajbhandari et al. 2020, ZeRO (arXiv 1910.02054), Sec. 5",
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

"""Bundled cost sources (data in ``shardmeter/hardware_catalog/prices.toml``).

``cloud-on-demand`` (dated per-GPU-hour rent), ``owned`` (purchase price
amortised over a lifetime plus energy) and ``egress`` (traffic between
islands only), registered through the public plugin API.
"""

from __future__ import annotations

import shardmeter
from shardmeter.registry.catalog import load_records


@shardmeter.hookimpl
def shardmeter_cost_sources():
    return load_records("shardmeter.hardware_catalog", "prices.toml", "cost", shardmeter.CostSource)

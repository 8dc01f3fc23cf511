"""Bundled interconnect models (data in ``shardmeter/hardware_catalog/links.toml``).

Scale-up fabrics (NVLink, PCIe, xGMI, Gaudi RoCE, TPU ICI), scale-out
networks (InfiniBand, RoCE, EFA, Ethernet; bandwidth per NIC) and the
wide-area ``internet`` uplink, registered through the public plugin API.
"""

from __future__ import annotations

import shardmeter
from shardmeter.registry.catalog import load_records


@shardmeter.hookimpl
def shardmeter_interconnect_models():
    return load_records("shardmeter.hardware_catalog", "links.toml", "link", shardmeter.Interconnect)

"""Bundled accelerator profiles (data in ``shardmeter/hardware_catalog/gpus.toml``).

Registers the NVIDIA, AMD, Intel and Google parts listed in SCENARIO.md
("Bundled names") through the public plugin API, exactly as a third-party
distribution would. Every figure's provenance is in the record's ``source``.
"""

from __future__ import annotations

import shardmeter
from shardmeter.registry.catalog import load_records


@shardmeter.hookimpl
def shardmeter_hardware_profiles():
    return load_records("shardmeter.hardware_catalog", "gpus.toml", "gpu", shardmeter.HardwareProfile)

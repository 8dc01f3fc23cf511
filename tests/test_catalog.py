"""The bundled hardware, interconnect and cost catalogs (shardmeter/hardware_catalog/*.toml).

Checks the names docs/scenario.md ("Bundled names") promises, that every GPU's
default links exist, a few sourced figures from
docs/reference/hardware_and_physics.md, and that every record cites a source.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from importlib import resources

import pytest

import shardmeter

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GPUS = [
    "v100-sxm2-32gb", "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb", "a10g", "l4", "l40s",
    "h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "gh200", "b200", "gb200", "rtx-4090", "rtx-3090",
    "mi250x", "mi300x", "mi325x", "gaudi2", "gaudi3", "tpu-v4", "tpu-v5e", "tpu-v5p",
]  # fmt: skip
LINKS = [
    "nvlink2", "nvlink3", "nvlink4", "nvlink5", "pcie4", "pcie5", "xgmi", "ib-edr", "ib-hdr", "ib-ndr",
    "ib-xdr", "roce-100g", "roce-200g", "roce-400g", "efa-v2", "ethernet-10g", "ethernet-25g",
    "ethernet-100g", "internet",
]  # fmt: skip
COSTS = ["cloud-on-demand", "owned", "egress"]

CATALOG_MODULES = (
    "shardmeter.plugins.hardware",
    "shardmeter.plugins.interconnects",
    "shardmeter.plugins.costs",
)


@pytest.fixture(scope="module")
def registry() -> shardmeter.Registry:
    """The registry of the bundled plugins, loaded by dotted name (no entry points)."""
    if importlib.util.find_spec("shardmeter.strategies.builtin") is not None:
        pm = shardmeter.make_plugin_manager(entry_points=False, bundled=True)
    else:  # the strategies plugin is not written yet: load the catalog plugins alone
        mods = [importlib.import_module(m) for m in CATALOG_MODULES]
        pm = shardmeter.make_plugin_manager(entry_points=False, bundled=False, plugins=mods)
    return shardmeter.Registry.from_plugin_manager(pm)


def _gpu(registry, name) -> shardmeter.HardwareProfile:
    return registry.get("hardware", name)


def _link(registry, name) -> shardmeter.Interconnect:
    return registry.get("interconnect", name)


# (a) names ------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "names"), [("hardware", GPUS), ("interconnect", LINKS), ("cost", COSTS)])
def test_scenario_names_are_registered(registry, kind, names):
    missing = sorted(set(names) - set(registry.names(kind)))
    assert not missing, f"{kind} names missing from the bundled catalog: {missing}"


@pytest.mark.parametrize(
    ("filename", "table"), [("gpus.toml", "gpu"), ("links.toml", "link"), ("prices.toml", "cost")]
)
def test_catalog_files_parse_and_names_are_unique(filename, table):
    text = resources.files("shardmeter.hardware_catalog").joinpath(filename).read_text(encoding="utf-8")
    entries = tomllib.loads(text)[table]
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names)), f"duplicate names in {filename}"


# (b) platform defaults name registered links --------------------------------


@pytest.mark.parametrize("gpu", GPUS)
def test_default_links_are_registered(registry, gpu):
    hw = _gpu(registry, gpu)
    links = set(registry.names("interconnect"))
    assert hw.intra_node in links, f"{gpu}: intra_node {hw.intra_node!r} is not a registered link"
    assert hw.inter_node in links, f"{gpu}: inter_node {hw.inter_node!r} is not a registered link"
    assert _link(registry, hw.intra_node).kind == "scale-up"
    assert hw.nics_per_node is not None and hw.nics_per_node >= 1
    assert hw.gpus_per_node >= 1


def test_every_link_default_is_well_formed(registry):
    for gpu in GPUS:
        hw = _gpu(registry, gpu)
        assert _link(registry, hw.inter_node).kind in ("scale-up", "network"), gpu
    assert _link(registry, "internet").kind == "wan"


# (c) known figures from the reference ---------------------------------------


def test_a100_80gb_figures(registry):
    hw = _gpu(registry, "a100-sxm-80gb")
    assert hw.peak_tflops["bf16"] == pytest.approx(312.0)
    assert hw.memory_bandwidth_gb_s == pytest.approx(2039.0)
    assert hw.memory_gb == pytest.approx(80.0)
    # fitted on the bundled runs: a sustained training efficiency at or below the MAMF (86.9 %)
    assert 0.5 < hw.matmul_efficiency <= 0.869 and "fitted" in hw.source
    assert (hw.intra_node, hw.inter_node) == ("nvlink3", "ib-hdr")


def test_h100_sxm_figures(registry):
    hw = _gpu(registry, "h100-sxm")
    assert hw.peak_tflops["bf16"] == pytest.approx(989.0, abs=0.5)
    assert hw.peak_tflops["fp8"] == pytest.approx(1979.0, abs=1.0)
    assert hw.memory_bandwidth_gb_s == pytest.approx(3350.0)
    assert 0.3 < hw.matmul_efficiency <= 0.803 and "fitted" in hw.source  # MAMF 80.3 %
    assert (hw.intra_node, hw.inter_node, hw.nics_per_node) == ("nvlink4", "ib-ndr", 8)
    assert (hw.sm_count, hw.tile_m, hw.tile_n) == (132, 128, 256)


def test_blackwell_figures(registry):
    assert _gpu(registry, "b200").memory_gb == pytest.approx(180.0)
    assert _gpu(registry, "b200").peak_tflops["bf16"] == pytest.approx(2250.0)
    assert _gpu(registry, "gb200").gpus_per_node == 4


def test_link_figures(registry):
    assert _link(registry, "nvlink4").bandwidth_gb_s == pytest.approx(450.0)
    assert _link(registry, "nvlink3").bandwidth_gb_s == pytest.approx(300.0)
    assert _link(registry, "nvlink5").bandwidth_gb_s == pytest.approx(900.0)
    assert _link(registry, "ib-ndr").bandwidth_gb_s == pytest.approx(50.0)
    assert _link(registry, "ib-ndr").efficiency == pytest.approx(0.94)
    assert _link(registry, "ib-hdr").bandwidth_gb_s == pytest.approx(25.0)
    assert _link(registry, "ib-edr").bandwidth_gb_s == pytest.approx(12.5)
    assert _link(registry, "ib-xdr").bandwidth_gb_s == pytest.approx(100.0)
    assert _link(registry, "internet").egress_usd_per_gb == pytest.approx(0.09)


def test_link_bandwidth_is_one_direction(registry):
    # NVLink 4 is "900 GB/s" bidirectional; the catalog stores the per-direction half.
    assert _link(registry, "nvlink4").bandwidth_gb_s < 900.0
    for name in LINKS:
        link = _link(registry, name)
        assert 0 < link.efficiency <= 1, name
        assert link.latency_us > 0, name


def test_cost_sources(registry):
    cloud = registry.get("cost", "cloud-on-demand")
    h100 = _gpu(registry, "h100-sxm")
    assert cloud.date == "2026-06"
    assert cloud.egress_usd_per_gb == pytest.approx(0.09)
    assert 1.0 < cloud.gpu_hour_usd(h100) < 15.0
    assert set(cloud.gpu_prices) <= set(GPUS)
    owned = registry.get("cost", "owned")
    assert (owned.lifetime_years, owned.usd_per_kwh, owned.pue, owned.utilization) == (4.0, 0.10, 1.3, 0.8)
    assert set(owned.purchase_usd) <= set(GPUS)
    assert 0.0 < owned.gpu_hour_usd(h100) < 5.0
    egress = registry.get("cost", "egress")
    assert egress.gpu_hour_usd(h100) == 0.0
    assert egress.egress_usd_per_gb == pytest.approx(0.09)


# (d) provenance ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["hardware", "interconnect", "cost"])
def test_every_record_cites_a_source(registry, kind):
    for name in registry.names(kind):
        assert registry.get(kind, name).source.strip(), f"{kind} {name!r} has no source"


def test_default_matmul_efficiency_is_labelled(registry):
    for gpu in GPUS:
        hw = _gpu(registry, gpu)
        if hw.matmul_efficiency == pytest.approx(0.80) and "fitted" not in hw.source:
            assert "matmul_efficiency: default, not measured" in hw.source, gpu


# (e) precisions the part has no hardware for -------------------------------


@pytest.mark.parametrize(
    "gpu", ["v100-sxm2-32gb", "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb", "rtx-3090"]
)
def test_no_fp8_on_parts_without_fp8(registry, gpu):
    hw = _gpu(registry, gpu)
    assert "fp8" not in hw.peak_tflops
    # the model's fallback still yields the 16-bit rate
    assert hw.peak("fp8") == hw.peak("bf16") > 0


def test_v100_has_fp16_but_no_bf16(registry):
    hw = _gpu(registry, "v100-sxm2-32gb")
    assert "bf16" not in hw.peak_tflops
    assert hw.peak_tflops["fp16"] == pytest.approx(125.0)


@pytest.mark.parametrize("gpu", GPUS)
def test_peaks_are_dense_and_ordered(registry, gpu):
    hw = _gpu(registry, gpu)
    peaks = hw.peak_tflops
    assert hw.peak("bf16") > 0
    if "fp8" in peaks:
        assert peaks["fp8"] >= hw.peak("bf16")
    if "fp32" in peaks:
        assert peaks["fp32"] < hw.peak("bf16")
    assert all(math.isfinite(v) for v in peaks.values())

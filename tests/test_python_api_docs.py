"""docs/python-api.md as it is written: each ```python block runs, in order, in one namespace
from the repository root (the examples' paths are relative to it), and ``overrides`` takes the
three forms the page names."""

from __future__ import annotations

import pathlib
import re

import pytest

import shardmeter

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "python-api.md"
SCALE = "examples/studies/scale-nodes.toml"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_page_has_examples():
    assert len(_blocks()) >= 4


def test_every_example_on_the_page_runs(monkeypatch):
    pytest.importorskip("pandas")
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for i, block in enumerate(_blocks()):
        exec(compile(block, f"{DOC.name} block {i + 1}", "exec"), namespace)
    assert namespace["twice"].gpus == 2 * namespace["report"].gpus == 128
    assert namespace["plans"].best is not None and namespace["sens"].to_dataframe() is not None


@pytest.mark.parametrize(
    "overrides",
    [{"island[0].nodes": 16}, ["island[0].nodes=16"], [("island[0].nodes", 16)], "island[0].nodes=16"],
    ids=["dict", "strings", "pairs", "one string"],
)
def test_estimate_overrides_take_a_dict_strings_or_pairs(monkeypatch, overrides):
    monkeypatch.chdir(ROOT)
    assert shardmeter.estimate(SCALE).gpus == 64
    assert shardmeter.estimate(SCALE, overrides=overrides).gpus == 128

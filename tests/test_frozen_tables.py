"""A frozen record's tables are read-only: no caller of the API can change a registered part
or a loaded scenario, and so every later estimate of the process (the registry is shared)."""

from __future__ import annotations

import copy
import json
import pickle

import attrs
import pytest
from shared_scenarios import TINY

from shardmeter.estimator import Estimator
from shardmeter.frozen import FrozenDict


def _tables(est):
    gpu = est.registry.get("hardware", "a100-sxm-40gb")
    sc = est.load(TINY)
    sharding = est.registry.get("sharding", "zero1")
    return {
        "peak_tflops": gpu.peak_tflops,
        "parallelism.options": sc.parallelism.options,
        "sync.options": sc.sync.options,
        "measured": sc.measured,
        "source": sc.source,
        **{
            f"sharding.{a.name}": getattr(sharding, a.name)
            for a in attrs.fields(type(sharding))
            if isinstance(getattr(sharding, a.name), dict)
        },
    }


@pytest.mark.parametrize(
    "mutate",
    [
        lambda t: t.__setitem__("bf16", 1.0),
        lambda t: t.update(bf16=1.0),
        lambda t: t.pop("bf16", None),
        lambda t: t.clear(),
        lambda t: t.setdefault("fp8", 1.0),
        lambda t: t.__ior__({"bf16": 1.0}),
    ],
    ids=["setitem", "update", "pop", "clear", "setdefault", "ior"],
)
def test_tables_of_records_refuse_changes_and_later_estimates_stay(mutate):
    est = Estimator()
    before = est.estimate(TINY).step_time_s
    for name, table in _tables(est).items():
        with pytest.raises(TypeError, match="read-only"):
            mutate(table)
        assert isinstance(table, FrozenDict), name
    assert est.estimate(TINY).step_time_s == before


def test_a_frozen_table_is_still_a_dict_to_json_pickle_and_copies():
    t = Estimator().registry.get("hardware", "h100-sxm").peak_tflops
    assert json.loads(json.dumps(t)) == dict(t)
    back = pickle.loads(pickle.dumps(t))
    assert back == t and isinstance(back, FrozenDict)
    assert copy.deepcopy(t) == t and hash(copy.deepcopy(t)) == hash(t)
    assert attrs.asdict(Estimator().registry.get("hardware", "h100-sxm"))["peak_tflops"] == dict(t)

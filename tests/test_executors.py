"""Executors: local processes and dask give exactly the serial answer, and lose no chunk."""

from __future__ import annotations

import json

import pytest
from shared_scenarios import TINY

from shardmeter.explore.execution.executors import FailOnce, TaskFailed, run_tasks
from shardmeter.explore.search.plan import score_chunk, search
from shardmeter.explore.search.sweep import run_sweep

CHUNK = 5000  # ~25 tasks over the tiny space


def _square(payload, task):
    return payload * task * task


def _always_fails(payload, task):
    raise ValueError("broken")


def _key(doc):
    """What must not depend on the executor."""
    return json.dumps(
        {k: doc[k] for k in ("evaluated", "feasible", "infeasible", "duplicates")}
        | {
            "ids": doc.get("ids"),
            "front": doc.get("front"),
            "plans": [p["report"]["step_time_s"] for p in doc["plans"]],
        },
        sort_keys=True,
    )


@pytest.fixture(scope="module")
def serial():
    return {obj: search(TINY, objective=obj, top=5, chunk_size=CHUNK) for obj in ("time", "pareto")}


def test_run_tasks_serial_and_processes_agree():
    tasks = list(range(12))
    serial = dict(run_tasks(_square, 3, tasks))
    procs = dict(run_tasks(_square, 3, tasks, workers=2))
    assert serial == procs == {t: 3 * t * t for t in tasks}


def test_a_task_failing_every_time_is_reported():
    with pytest.raises(TaskFailed, match="broken"):
        list(run_tasks(_always_fails, None, [1, 2], retries=1))
    with pytest.raises(TaskFailed, match="broken"):
        list(run_tasks(_always_fails, None, [1, 2], workers=2, retries=1))


@pytest.mark.parametrize("objective", ["time", "pareto"])
def test_process_pool_plan_equals_serial(serial, objective):
    doc = search(TINY, objective=objective, top=5, chunk_size=CHUNK, workers=2)
    assert _key(doc) == _key(serial[objective])


@pytest.mark.parametrize("mode", ["raise", "exit"])
def test_process_pool_loses_no_chunk_when_a_task_fails_or_its_worker_dies(serial, tmp_path, mode):
    from shardmeter.estimator import Estimator
    from shardmeter.explore.search.space import compile_space
    from shardmeter.load.scenario import load_scenario

    est = Estimator()
    sp = compile_space(load_scenario(TINY, registry=est.registry), est)
    per = max(1, CHUNK // sp.R_in)
    flaky = FailOnce(score_chunk, (2 * per, 3 * per), str(tmp_path / "marker"), mode=mode)  # the third task
    doc = search(TINY, objective="time", top=5, chunk_size=CHUNK, workers=2, chunk_fn=flaky)
    assert (tmp_path / "marker").exists()  # the fault did happen
    assert _key(doc) == _key(serial["time"])


def test_sweep_on_processes_equals_serial():
    vary = [("island[0].nodes", [1, 2]), ("training.micro_batch", [1, 2, 4])]
    a = run_sweep(TINY, vary).to_dict()
    b = run_sweep(TINY, vary, workers=2, chunk_rows=2).to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("dask.distributed")
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    )
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


@pytest.mark.parametrize("objective", ["time", "pareto"])
def test_dask_local_cluster_plan_equals_serial(serial, dask_client, objective):
    doc = search(TINY, objective=objective, top=5, chunk_size=CHUNK, dask=dask_client)
    assert _key(doc) == _key(serial[objective])


def test_dask_retries_a_failed_chunk(serial, dask_client, tmp_path):
    from shardmeter.estimator import Estimator
    from shardmeter.explore.search.space import compile_space
    from shardmeter.load.scenario import load_scenario

    est = Estimator()
    sp = compile_space(load_scenario(TINY, registry=est.registry), est)
    per = max(1, CHUNK // sp.R_in)
    flaky = FailOnce(score_chunk, (per, 2 * per), str(tmp_path / "marker"), mode="raise")
    doc = search(TINY, objective="time", top=5, chunk_size=CHUNK, dask=dask_client, chunk_fn=flaky)
    assert (tmp_path / "marker").exists()
    assert _key(doc) == _key(serial["time"])


def test_dask_sweep_equals_serial(dask_client):
    vary = [("training.micro_batch", [1, 2, 4, 8])]
    a = run_sweep(TINY, vary).to_dict()
    b = run_sweep(TINY, vary, dask=dask_client, chunk_rows=1).to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_dask_worker_process_that_dies_loses_no_chunk(serial, tmp_path):
    """A real worker death: the task's process exits; the nanny restarts it and the chunk runs again."""
    distributed = pytest.importorskip("dask.distributed")
    from shardmeter.estimator import Estimator
    from shardmeter.explore.search.space import compile_space
    from shardmeter.load.scenario import load_scenario

    est = Estimator()
    sp = compile_space(load_scenario(TINY, registry=est.registry), est)
    per = max(1, CHUNK // sp.R_in)
    flaky = FailOnce(score_chunk, (per, 2 * per), str(tmp_path / "marker"), mode="exit")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        doc = search(TINY, objective="time", top=5, chunk_size=CHUNK, dask=client, chunk_fn=flaky)
    assert (tmp_path / "marker").exists()
    assert _key(doc) == _key(serial["time"])

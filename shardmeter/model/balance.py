"""``[sync] batch_split = "balanced"``: each island's share of the global batch, chosen by the
model itself (the shortest step over whole numbers of micro-batches per replica)."""

from __future__ import annotations

import attrs
import numpy as np

from shardmeter.errors import ScenarioError
from shardmeter.inputs.bundles import ModelInputs, PartTable
from shardmeter.model.evaluate import evaluate
from shardmeter.model.islands import island_finish, min_max_shares, ring_pace

__all__ = ["balance", "balanced_shares", "BALANCED_MAX_CELLS"]


def balance(inp: ModelInputs, table: PartTable, file: str | None = None) -> ModelInputs:
    """``inp`` with each island's ``training.island_batch`` set to :func:`balanced_shares`
    (unchanged where no balanced split is feasible)."""
    shares = balanced_shares(inp, table, file)
    if shares is None:
        return inp
    return attrs.evolve(inp, training=attrs.evolve(inp.training, island_batch=shares))


#: Largest ``micro-batches per replica x (global_batch + 1)`` that ``batch_split = "balanced"``
#: splits exactly (its min-max tables are that size; 2^24 float64 cells = 128 MiB).
BALANCED_MAX_CELLS = 2**24


def balanced_shares(inp: ModelInputs, table: PartTable, res_file: str | None = None) -> np.ndarray | None:
    """``[sync] batch_split = "balanced"``: each island's share of ``global_batch`` (sequences,
    ``(1, I)``), a whole number of micro-batches per replica, chosen so that the step (the
    largest island finish time, :func:`~shardmeter.model.islands.island_finish`) is the
    shortest. The model is evaluated once on a batch whose row ``r`` gives every island ``r``
    micro-batches per replica; :func:`~shardmeter.model.islands.min_max_shares` splits exactly.
    ``None`` (keep the split by replicas) when no balanced split is feasible; a
    :class:`~shardmeter.errors.ScenarioError` naming ``sync.batch_split`` past
    :data:`BALANCED_MAX_CELLS`."""
    cols = inp.columns()
    n = int(np.shape(cols["layout.dp"])[-1])
    gb = int(np.asarray(cols["training.global_batch"]).ravel()[0])
    q = (np.broadcast_to(cols["layout.dp"], (1, n)) * np.broadcast_to(cols["training.micro_batch"], (1, n)))[
        0
    ]
    q = q.astype(np.int64)
    m_max = gb // np.maximum(q, 1)
    rows = int(max(1, m_max.max()))
    if rows * (gb + 1) > BALANCED_MAX_CELLS:  # the exact min-max holds shares x micro-batch counts
        raise ScenarioError(
            f'"balanced" splits at most {BALANCED_MAX_CELLS:,} (micro-batches per replica x '
            f'(global_batch + 1)) combinations, here {rows:,} x {gb + 1:,}; use "replicas"',
            path="sync.batch_split",
            file=res_file,
        )
    r = np.arange(1, rows + 1, dtype=np.int64)[:, None]
    cols["training.island_batch"] = (np.minimum(r, np.maximum(m_max, 1)[None, :]) * q[None, :]).astype(float)
    with np.errstate(all="ignore"):
        out = evaluate(ModelInputs.from_columns(cols), table, detail=False)
    ok = (np.asarray(out.reasons) == 0) & (r <= m_max[None, :])
    net = ring_pace(cols["network.wan_bytes_s"], cols["network.wan_latency_s"])
    code = int(np.asarray(cols["network.sync"]).ravel()[0])
    finish, _ = island_finish(
        table,
        code,
        n,
        np.asarray(out.island.step_s),
        out.island.ar_window_s,
        np.asarray(out.params)[:, None],
        out.island.grad_bytes,
        net,
    )
    curves = []
    for j in range(n):
        cur = np.full(gb + 1, np.inf)
        sel = ok[:, j]
        cur[(r[sel, 0] * q[j])] = finish[sel, j]
        curves.append(cur)
    _, shares = min_max_shares(curves, gb)
    return None if shares is None else np.asarray([shares], dtype=float)

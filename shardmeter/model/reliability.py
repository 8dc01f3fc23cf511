"""Failures, checkpoints and preemption: the useful fraction of a job's wall time.

A job of ``G`` GPUs on ``nodes`` nodes is interrupted unexpectedly at the rate its failure part
gives (``[reliability] model``; the bundled ones: ``G / gpu_mtbf_h`` per hour) plus every
island's preemptions (``preemption_per_h x nodes``); its MTBF ``M`` is the inverse (seconds).
It checkpoints every ``tau`` seconds of work, each checkpoint stalling it ``C`` seconds, and
each interruption costs a restart ``R`` and the work since the last checkpoint.

* Checkpoint size: every parameter's weights in the training precision plus the optimizer's
  state with its fp32 master copy (``weight_bytes + 12``, ``4 + 8`` in fp32: the bytes
  :func:`shardmeter.model.sharding.shard_inputs` gives the state), plus a sync strategy's extra
  state per parameter (DiLoCo's outer momentum and copy), once per island (each island holds
  a whole replica). Every node of an island writes its share in parallel (Megatron-Core's
  fully parallel distributed save; torch.distributed.checkpoint spreads de-duplicated shards
  over ranks), so a synchronous checkpoint stalls ``bytes / (nodes x checkpoint_write_gb_s)``,
  the slowest island setting the pace.
* Asynchronous checkpoint (``async_checkpoint = true``, as torch.distributed.checkpoint's
  ``async_save`` and Megatron's ``--async-save``): only the copy of each GPU's share to host
  memory stalls (``bytes / GPUs`` over the GPU's ``host_link_gb_s``); the write runs under
  training, so checkpoints are at least the write time apart, and an interruption also loses
  the write in flight (``R`` grows by the write time).
* The interval: ``checkpoint_interval_s``, or with 0 Young's optimum ``tau = sqrt(2 C M)``
  (Young 1974, "A first order approximation to the optimum checkpoint interval", CACM 17(9);
  the contract's "Young/Daly optimum").
* The expected wall time of ``T_s`` seconds of work (Daly 2006, "A higher order estimate of the
  optimum checkpoint interval for restart dumps", FGCS 22(3), 303-312: his complete model, exponential failures,
  failures during restarts and checkpoints included): ``T_w = M e^(R/M) (e^((tau+C)/M) - 1)
  T_s / tau``. Planned stops (maintenance, the job checkpoints first) at rate ``p`` cost a
  restart each and no work: ``T = T_w / (1 - p R)``. ``goodput = T_s / T``; 0 when the job
  never finishes (``p R >= 1``).

Pure numpy functions, elementwise over the planner's rows (Python floats on the report path).
"""

from __future__ import annotations

import numpy as np

from shardmeter.numeric.ops import Array

__all__ = [
    "checkpoint_bytes_per_param",
    "young_daly_interval_s",
    "daly_wall_factor",
    "goodput",
    "Checkpoint",
    "checkpoint_terms",
]


def checkpoint_bytes_per_param(weight_bytes: Array, sync_state_bytes: Array = 0.0) -> Array:
    """Bytes one parameter adds to a checkpoint: its weight, the optimizer's state with the fp32
    master copy (12 bytes with 16-bit weights, 8 in fp32, as the model holds them), and the
    sync strategy's extra state."""
    wb = np.asarray(weight_bytes, dtype=float)
    return wb + np.where(wb > 2, 8.0, 12.0) + sync_state_bytes


def young_daly_interval_s(checkpoint_s: Array, mtbf_s: Array) -> Array:
    """Young's optimal interval between checkpoints, ``sqrt(2 C M)`` (seconds of work)."""
    return np.sqrt(2.0 * np.asarray(checkpoint_s, dtype=float) * mtbf_s)


def daly_wall_factor(interval_s: Array, checkpoint_s: Array, restart_s: Array, mtbf_s: Array) -> Array:
    """``T_w / T_s`` (Daly 2006, the complete model): ``M e^(R/M) (e^((tau+C)/M) - 1) / tau``; ``(tau + C) /
    tau`` without failures (``M`` infinite)."""
    tau = np.asarray(interval_s, dtype=float)
    m = np.asarray(mtbf_s, dtype=float)
    finite = np.isfinite(m)
    ms = np.where(finite, m, 1.0)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        failing = ms * np.exp(restart_s / ms) * np.expm1((tau + checkpoint_s) / ms) / tau
        return np.where(finite, failing, 1.0 + checkpoint_s / tau)


def goodput(
    interval_s: Array, checkpoint_s: Array, restart_s: Array, mtbf_s: Array, planned_per_s: Array
) -> Array:
    """The useful fraction of wall time (module docstring): ``1 / daly_wall_factor x (1 - p
    R)``, 0 where planned stops alone fill the time."""
    left = 1.0 - np.asarray(planned_per_s, dtype=float) * restart_s
    with np.errstate(divide="ignore", invalid="ignore"):
        g = left / daly_wall_factor(interval_s, checkpoint_s, restart_s, mtbf_s)
    return np.where(left > 0, np.nan_to_num(g, nan=0.0), 0.0)


class Checkpoint:
    """One checkpoint's figures: ``stall_s`` (the training stops), ``write_s`` (until it is
    durable), ``interval_s`` (seconds of work between checkpoints) and ``restart_s`` (the
    restart plus, asynchronously, the write lost in flight)."""

    __slots__ = ("interval_s", "restart_s", "stall_s", "write_s")

    def __init__(self, stall_s: Array, write_s: Array, interval_s: Array, restart_s: Array):
        self.stall_s, self.write_s, self.interval_s, self.restart_s = stall_s, write_s, interval_s, restart_s


def checkpoint_terms(
    *,
    write_s: Array,
    snapshot_s: Array,
    async_checkpoint: bool,
    interval_s: float,
    restart_s: Array,
    mtbf_s: Array,
) -> Checkpoint:
    """The stall, interval and effective restart of a checkpoint written in ``write_s`` (its
    host copy taking ``snapshot_s``): synchronous, the stall is the write; asynchronous, the
    snapshot, checkpoints at least ``write_s`` apart and the write lost on an interruption.
    ``interval_s`` 0: Young's optimum for that stall."""
    stall = np.asarray(snapshot_s if async_checkpoint else write_s, dtype=float)
    tau = young_daly_interval_s(stall, mtbf_s) if interval_s == 0 else np.asarray(float(interval_s))
    with np.errstate(invalid="ignore"):
        tau = np.where(np.isfinite(tau), tau, np.inf)
    if async_checkpoint:
        tau = np.maximum(tau, write_s)
        restart = np.asarray(restart_s, dtype=float) + write_s
    else:
        restart = np.asarray(restart_s, dtype=float)
    return Checkpoint(stall, np.asarray(write_s, dtype=float), tau, restart)

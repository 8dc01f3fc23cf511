"""Published loss penalties of compressed and streamed DiLoCo exchanges: ``(bits, fragments) ->``
loss ratio over the same strategy at full precision and one fragment, with each point's source.

A point is what a paper reports from its loss curves for plain DiLoCo (AdamW inside, Nesterov
outside, no error feedback), the strategy ``diloco`` prices. Between the published bit widths of
a row the ratio is interpolated linearly in ``log2(bits)``; outside them it is held at the nearest
published point and flagged (``in_table = False``, the plan table's ``conv-extrap``).

Rows (every published value is a ratio of 1: each source reports no measurable loss change):

* **One fragment** (DiLoCo): 32 bits, the fp32 pseudo-gradients of Douillard et al. 2023 (arXiv
  2311.08105), the reference; 16 bits, OpenDiLoCo (arXiv 2407.07852: FP16 all-reduce matches
  FP32); 8 bits, INTELLECT-1 (arXiv 2412.01152: int8 pseudo-gradients "without any impact on the
  loss curves"); 4 bits, Streaming DiLoCo (arXiv 2501.18512: FP4 E3M0 outer gradients "without a
  significant loss of performance", Sec. 2.3 and Table 1).
* **Several fragments** (Streaming DiLoCo, arXiv 2501.18512): the paper's runs stream fragments
  at full precision (32 bits) and with FP4 outer gradients (4 bits), at the quality of DiLoCo
  (Table 1). It bounds no fragment count, so none is bounded here.

Below 4 bits the published results (MuLoCo, arXiv 2505.23725: 2-bit deltas "with next to no
performance degradation" with an error-feedback accumulator and Muon inside; SparseLoCo, arXiv
2508.15706: 2-bit Top-k deltas with error feedback beat full-precision DiLoCo) all rely on error
feedback, which ``diloco`` does not model: :data:`ERROR_FEEDBACK_POINTS` lists them, and plain
DiLoCo below 4 bits is held at the 4-bit value and flagged. No 1-bit result with loss curves is
published for DiLoCo.
"""

from __future__ import annotations

import attrs
import numpy as np

from shardmeter.numeric.ops import Array

__all__ = ["CompressionPoint", "POINTS", "ERROR_FEEDBACK_POINTS", "compression_loss_ratio"]


@attrs.frozen(kw_only=True)
class CompressionPoint:
    """One published point: ``bits`` per exchanged element, ``streaming`` (fragments > 1),
    ``loss_ratio`` over full precision with one fragment, its ``source`` (paper and where)."""

    bits: float
    streaming: bool
    loss_ratio: float
    source: str


POINTS: tuple[CompressionPoint, ...] = (
    CompressionPoint(
        bits=32, streaming=False, loss_ratio=1.0, source="Douillard et al. 2023, arXiv 2311.08105 (fp32)"
    ),
    CompressionPoint(
        bits=16, streaming=False, loss_ratio=1.0, source="OpenDiLoCo, arXiv 2407.07852 (FP16 = FP32)"
    ),
    CompressionPoint(bits=8, streaming=False, loss_ratio=1.0, source="INTELLECT-1, arXiv 2412.01152 (int8)"),
    CompressionPoint(
        bits=4, streaming=False, loss_ratio=1.0, source="Streaming DiLoCo, arXiv 2501.18512 (FP4 E3M0)"
    ),
    CompressionPoint(
        bits=32, streaming=True, loss_ratio=1.0, source="Streaming DiLoCo, arXiv 2501.18512, Table 1"
    ),
    CompressionPoint(
        bits=4, streaming=True, loss_ratio=1.0, source="Streaming DiLoCo, arXiv 2501.18512, Table 1 (FP4)"
    ),
)

#: Published below 4 bits, with an error-feedback accumulator only (not ``diloco``'s algorithm).
ERROR_FEEDBACK_POINTS: tuple[CompressionPoint, ...] = (
    CompressionPoint(
        bits=2, streaming=False, loss_ratio=1.0, source="MuLoCo, arXiv 2505.23725 (Muon + error feedback)"
    ),
    CompressionPoint(
        bits=2,
        streaming=False,
        loss_ratio=1.0,
        source="SparseLoCo, arXiv 2508.15706 (Top-k + error feedback)",
    ),
)


def _row(points: tuple[CompressionPoint, ...], streaming: bool) -> tuple[np.ndarray, np.ndarray]:
    row = sorted((p.bits, p.loss_ratio) for p in points if p.streaming == streaming)
    return np.log2([b for b, _ in row]), np.array([r for _, r in row])


def compression_loss_ratio(
    bits: Array, fragments: Array, points: tuple[CompressionPoint, ...] = POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """``(ratio, in_table)`` elementwise: the loss ratio of exchanging at ``bits`` with
    ``fragments`` from ``points`` (module docstring), and whether the plan lies inside the
    published bit widths of its row (one fragment, or several)."""
    b = np.asarray(bits, dtype=float)
    f = np.asarray(fragments, dtype=float)
    x = np.log2(np.maximum(b, 1e-300))
    out, inside = [], []
    for streaming in (False, True):
        xs, ys = _row(points, streaming)
        out.append(np.interp(x, xs, ys))  # held at the end values outside
        inside.append((x >= xs[0]) & (x <= xs[-1]))
    many = f > 1
    return np.where(many, out[1], out[0]), np.where(many, inside[1], inside[0])

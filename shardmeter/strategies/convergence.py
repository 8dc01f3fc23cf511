"""The bundled convergence model: DiLoCo's loss gap from published fits, as a tokens factor.

``tokens_factor = D_needed / D_dp``: the tokens a sync strategy needs to reach the loss that
data-parallel (DP) training reaches with ``D_dp`` tokens, for the same model. Time and cost to
that quality are the raw figures times the factor (``shardmeter/report/quality.py``,
``docs/convergence.md``). The factor never lowers a figure: it is at least 1.

**For the planner** (one call per batch, pure and vectorised over plans)::

    factor, in_range = tokens_factor(model, table, sync_codes, params=N, replicas=M)

``model``: a :class:`~shardmeter.parts.ConvergencePart` (``Resolved.convergence``); ``table``:
the batch's :class:`~shardmeter.inputs.bundles.PartTable`; ``sync_codes``: each plan's sync code
(``network.sync``), an integer array; ``params`` and ``replicas`` (islands): arrays that
broadcast against it. ``factor`` multiplies ``wall_clock_s`` and ``cost_usd``; ``in_range``
says whether the plan lies inside the model's :data:`VALIDITY`. :func:`loss_ratio` and
:func:`factor_from_loss_ratio` are the two steps, each over named arrays.

The model, in three steps (each constant below is cited where it is defined):

1. **Loss ratio at H = 30**, the default cadence of Charles et al. 2025 (arXiv 2503.09799),
   from their joint power law for DiLoCo, ``L = A N^alpha M^beta`` (Table 10), over their DP
   fit ``L = A N^alpha`` (Table 7), both at D = 20 N tokens, N in parameters:
   ``r30 = (19.226 / 18.129) N^(-0.0985 + 0.0953) M^0.0116``.
2. **The cadence H.** ``H = 1`` is DP (Charles et al., Table 6: "DiLoCo H=1 equals DP"), so
   ``r = 1`` there; between H = 1 and H = 30 the gap is interpolated linearly in ``log H``
   (the two published ends; no point between them is published). Above H = 30 the loss grows
   as ``r30 (H / 30)^s(N)``, a straight line in log loss against log H, because Douillard et
   al. 2023 (arXiv 2311.08105) give the sweep's end points only -- H = 1000 costs +2.9 %
   perplexity over H = 50 at 150M parameters and 8 replicas -- and report diminishing returns
   between them: ``20^s(150M) = 1 + log(1.029) / log(15.02)`` (perplexity -> nats, relative to
   the loss of that run, 15.02 perplexity at H = 500). "Larger models tolerate larger H"
   (Charles et al.) enters as the DiLoCo-vs-DP gap's own N exponent of step 1:
   ``s(N) = s(150M) (N / 150M)^(-0.0985 + 0.0953)``. The H effect is assumed independent of M
   (the sweep has M = 8 only).
3. **Loss ratio -> tokens.** DiLoCo is taken to train like DP on ``eta`` times the tokens
   (a constant data efficiency; Streaming DiLoCo's Table 1, arXiv 2501.18512, shows the loss
   gap to DP unchanged from 25B to 250B tokens at 1B parameters). ``eta`` follows from the
   ratio at Charles et al.'s D = 20 N with the Chinchilla loss ``L(N, D) = E + A/N^a + B/D^b``
   (Hoffmann et al. 2022, arXiv 2203.15556, Eq. 10, approach 3): the relative gap ``r - 1``
   transfers to that law as ``(r - 1) L(N, 20N)``, which DP closes with ``D^b``:
   ``factor = 1/eta = (1 + (r - 1) L(N, 20N) (20N)^b / B)^(1/b)``, floored at 1 (the model
   never credits DiLoCo with beating DP, although Table 10 predicts it for M = 1 and, past
   about 2B parameters, M = 2: those gains are below 1 % of the loss, within what the fit
   resolves at the sizes it extrapolates to).

Compression and fragments multiply the loss ratio by the published penalty of
:mod:`shardmeter.strategies.compression_table` (``(bits, fragments) -> loss ratio``, each point
cited there): FP16 pseudo-gradients match FP32 (OpenDiLoCo, arXiv 2407.07852), int8 works at
10B (INTELLECT-1, arXiv 2412.01152), FP4 (E3M0) outer gradients lose nothing measurable and
fragments with overlap tau < 5 are robust (Streaming DiLoCo, arXiv 2501.18512, Table 1 and
Sec. 3), so every published penalty is 1. Fewer than 4 bits (published only with error
feedback, which ``diloco`` does not model), or tau >= 5, lie outside the range (the factor is
then held at the nearest published point, flagged ``in_range = False``).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from shardmeter.numeric.ops import Array
from shardmeter.parts import ConvergenceInputs, ConvergencePart, ConvergenceTerms
from shardmeter.strategies.compression_table import compression_loss_ratio

__all__ = [
    "DiLoCoFits",
    "VALIDITY",
    "loss_ratio",
    "factor_from_loss_ratio",
]

# --- Charles et al. 2025, "Scaling Laws for DiLoCo" (arXiv 2503.09799) ---------------------
#: DiLoCo loss fit L = A N^alpha M^beta (Table 10, loss row): A, alpha, beta. N: parameters.
DILOCO_LOSS_A = 19.226
DILOCO_LOSS_ALPHA = -0.0985
DILOCO_LOSS_BETA = 0.0116
#: Data-parallel loss fit L = A N^alpha (Table 7), same data and tokens (D = 20 N).
DP_LOSS_A = 18.129
DP_LOSS_ALPHA = -0.0953
#: The synchronisation cadence of those fits (their default H, Sec. 3).
FIT_INNER_STEPS = 30.0
#: Tokens per parameter of those fits (Chinchilla-optimal D = 20 N, Sec. 3).
FIT_TOKENS_PER_PARAM = 20.0

# --- Douillard et al. 2023, "DiLoCo" (arXiv 2311.08105), H sweep at 150M, 8 replicas ---------
#: The sweep's two ends: H = 1000 costs +2.9 % perplexity over H = 50.
SWEEP_H_LOW, SWEEP_H_HIGH, SWEEP_PPL_RATIO = 50.0, 1000.0, 1.029
#: Perplexity of that 150M DiLoCo run (8 workers, H = 500): the loss scale of the sweep.
SWEEP_PPL = 15.02
#: Parameters of the model of the sweep.
SWEEP_PARAMS = 150e6
#: Exponent of the loss in H at 150M (derived from the constants above): the loss ratio
#: H = 1000 / H = 50 is ``1 + log(1.029) / log(15.02)`` (perplexity -> nats, relative), and
#: ``(1000 / 50)^s`` equals it.
H_EXPONENT_SWEEP = float(
    np.log1p(np.log(SWEEP_PPL_RATIO) / np.log(SWEEP_PPL)) / np.log(SWEEP_H_HIGH / SWEEP_H_LOW)
)

# --- Hoffmann et al. 2022, "Chinchilla" (arXiv 2203.15556), Eq. 10 (approach 3) ------------
CHINCHILLA_E = 1.69
CHINCHILLA_A = 406.4
CHINCHILLA_B = 410.7
CHINCHILLA_ALPHA = 0.34
CHINCHILLA_BETA = 0.28

#: The plans the sources cover, ``[low, high]`` per input (inclusive):
#: ``params`` 35M (Charles et al.'s smallest) to 10B (their extrapolation; INTELLECT-1 trained
#: 10B with DiLoCo); ``replicas`` 1 to 8 (Table 10's fit: M in {1, 2, 4, 8}); ``inner_steps`` 1
#: (DP) to 1000 (the end of Douillard et al.'s quantified pair); ``compression_bits`` 4 (FP4,
#: Streaming DiLoCo) to 32 (the original fp32); ``overlap_steps`` 0 to 4 (Streaming DiLoCo: robust
#: for tau < 5).
VALIDITY: dict[str, tuple[float, float]] = {
    "params": (35e6, 10e9),
    "replicas": (1.0, 8.0),
    "inner_steps": (1.0, 1000.0),
    "compression_bits": (4.0, 32.0),
    "overlap_steps": (0.0, 4.0),
}


def _chinchilla_loss(params: Array, tokens: Array) -> Array:
    return CHINCHILLA_E + CHINCHILLA_A / params**CHINCHILLA_ALPHA + CHINCHILLA_B / tokens**CHINCHILLA_BETA


def loss_ratio(*, params: Array, replicas: Array, inner_steps: Array) -> np.ndarray:
    """DiLoCo's loss over DP's at the same tokens (steps 1 and 2 of the module docstring),
    elementwise over ``params`` (N), ``replicas`` (M) and ``inner_steps`` (H >= 1)."""
    n = np.asarray(params, dtype=float)
    m = np.maximum(np.asarray(replicas, dtype=float), 1.0)
    h = np.maximum(np.asarray(inner_steps, dtype=float), 1.0)
    r30 = (DILOCO_LOSS_A / DP_LOSS_A) * n ** (DILOCO_LOSS_ALPHA - DP_LOSS_ALPHA) * m**DILOCO_LOSS_BETA
    below = 1.0 + (r30 - 1.0) * np.log(h) / np.log(FIT_INNER_STEPS)
    s = H_EXPONENT_SWEEP * (n / SWEEP_PARAMS) ** (DILOCO_LOSS_ALPHA - DP_LOSS_ALPHA)
    above = r30 * (h / FIT_INNER_STEPS) ** s
    return np.where(h <= FIT_INNER_STEPS, below, above)


def factor_from_loss_ratio(*, params: Array, ratio: Array) -> np.ndarray:
    """Tokens to reach DP's loss over DP's tokens (step 3), at least 1, elementwise."""
    n = np.asarray(params, dtype=float)
    d = FIT_TOKENS_PER_PARAM * n
    gap = (np.asarray(ratio, dtype=float) - 1.0) * _chinchilla_loss(n, d) * d**CHINCHILLA_BETA / CHINCHILLA_B
    return np.maximum(np.maximum(1.0 + gap, 1e-300) ** (1.0 / CHINCHILLA_BETA), 1.0)


def _inside(inp: ConvergenceInputs, validity: dict[str, tuple[float, float]]) -> np.ndarray:
    """Every input inside its range, or a synchronous plan (DP itself: factor 1 exactly)."""
    ok = np.asarray(True)
    for key, (low, high) in validity.items():
        x = np.asarray(getattr(inp, key), dtype=float)
        ok = ok & (x >= low) & (x <= high)
    return ok | ~np.asarray(inp.local_steps, dtype=bool)


@attrs.frozen(kw_only=True)
class DiLoCoFits(ConvergencePart):
    """The bundled model (module docstring): Charles et al. 2025 Table 10 for N and M, the H
    sweep of Douillard et al. 2023, Chinchilla's data term for the tokens; compression and
    fragments priced by the published table (:mod:`~shardmeter.strategies.compression_table`:
    free down to 4 bits), overlap up to 4 steps free (Streaming DiLoCo)."""

    def terms(self, inp: ConvergenceInputs, opts: Any) -> ConvergenceTerms:
        local = np.asarray(inp.local_steps, dtype=bool)
        ratio = loss_ratio(params=inp.params, replicas=inp.replicas, inner_steps=inp.inner_steps)
        penalty, in_table = compression_loss_ratio(inp.compression_bits, inp.fragments)
        ratio = ratio * penalty
        factor = np.where(local, factor_from_loss_ratio(params=inp.params, ratio=ratio), 1.0)
        in_range = _inside(inp, VALIDITY) & (in_table | ~local)
        return ConvergenceTerms(tokens_factor=factor, in_range=in_range)

    def validity(self) -> dict[str, Any]:
        return {k: list(v) for k, v in VALIDITY.items()}

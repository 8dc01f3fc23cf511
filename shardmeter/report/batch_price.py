"""The report's critical-batch figures (``[training] critical_batch``; ``docs/convergence.md``,
"The global batch"): the tokens the global batch needs to reach the run's loss over the tokens a
small batch needs, from :mod:`shardmeter.model.critical_batch`.

``training.tokens`` is read as the tokens a small batch (``B << B_crit``) needs; the target is
the loss Kaplan et al. 2020's Eq. 1.5 gives for the model's non-embedding parameters (the
report's ``params`` less the input embedding and, untied, the output layer: ``vocab x hidden``
each) on those tokens; the batch is ``global_batch x seq_len`` tokens per optimizer step (for a
local-step strategy: the inner step's, summed over the islands).
"""

from __future__ import annotations

from typing import Any

from shardmeter.model.critical_batch import (
    KAPLAN_RANGE,
    batch_factor,
    kaplan_critical_batch_tokens,
    kaplan_loss,
)

__all__ = ["BATCH_SOURCE", "batch_figures"]

#: What the ``kaplan-2020`` batch model is built from.
BATCH_SOURCE = (
    "McCandlish et al. 2018 (arXiv 1812.06162) E = E_min (1 + B / B_crit); "
    "Kaplan et al. 2020 (arXiv 2001.08361) B_crit(L) = 2e8 / L^(1/0.21) tokens, L(N, D) Eq. 1.5"
)


def _outside(values: dict[str, float]) -> list[str]:
    out = []
    for key, (low, high) in KAPLAN_RANGE.items():
        x = values[key]
        if x < low:
            out.append(f"{key} {x:g} < {low:g}")
        elif x > high:
            out.append(f"{key} {x:g} > {high:g}")
    return out


def batch_figures(res: Any, report: Any) -> dict[str, Any]:
    """The ``quality.batch`` object of a feasible ``report`` (``{}`` when ``critical_batch`` is
    ``"none"``, or without ``training.tokens``: the target loss needs them)."""
    sc = res.scenario
    model = getattr(sc.training, "critical_batch", "none")
    if model == "none" or not report.feasible or not sc.training.tokens:
        return {}
    m = sc.model
    embed = float(m.vocab) * float(m.hidden) * (1.0 if m.tied_embeddings else 2.0)
    n = max(float(report.params) - embed, 1.0)
    d = float(sc.training.tokens)
    loss = float(kaplan_loss(n, d))
    critical = float(kaplan_critical_batch_tokens(loss))
    batch = float(sc.training.global_batch) * float(m.seq_len)
    outside = _outside({"params_non_embedding": n, "tokens": d})
    return {
        "model": model,
        "source": BATCH_SOURCE,
        "batch_tokens": batch,
        "critical_batch_tokens": critical,
        "target_loss_nats": loss,
        "params_non_embedding": n,
        "batch_factor": float(batch_factor(batch, critical)),
        "in_validity_range": not outside,
        "validity": {k: list(v) for k, v in KAPLAN_RANGE.items()},
        "outside": outside,
    }

"""The global batch priced against a critical batch: extra tokens a large batch needs to reach the
same loss (``[training] critical_batch``; ``docs/convergence.md``, "The global batch").

McCandlish et al. 2018, *An Empirical Model of Large-Batch Training* (arXiv 1812.06162), Eq. 2.11
and Sec. 2.3: to reach a given loss with batch ``B`` takes ``S = S_min (1 + B_noise / B)`` steps
and ``E = E_min (1 + B / B_noise)`` examples, where ``S_min`` is the fewest steps (``B`` large) and
``E_min`` the fewest examples (``B`` small); the two trade as ``(S/S_min - 1)(E/E_min - 1) = 1``,
and the critical batch is ``B_crit = E_min / S_min`` (which the paper takes as ``B_noise``).
The **batch factor** is ``E / E_min = 1 + B / B_crit``: the tokens a batch of ``B`` tokens needs
over the tokens a small batch needs for the same loss. It is at least 1 and 2 at ``B = B_crit``.

Kaplan et al. 2020, *Scaling Laws for Neural Language Models* (arXiv 2001.08361), give the
critical batch of language models in tokens as a function of the loss only, Eq. 1.4 (Sec. 5.1):
``B_crit(L) = B* / L^(1/alpha_B)``, ``B* ~ 2e8`` tokens, ``alpha_B ~ 0.21``, ``L`` the
cross-entropy in nats. The loss a run reaches is their Eq. 1.5,
``L(N, D) = [(N_c / N)^(alpha_N / alpha_D) + D_c / D]^alpha_D`` with ``N`` the non-embedding
parameters, ``D`` the tokens and their joint fit's constants (Table 2): ``N_c = 6.4e13``,
``D_c = 1.8e13``, ``alpha_N = 0.076``, ``alpha_D = 0.103``. Their runs span 768 to 1.5e9 non-embedding
parameters and 22e6 to 23e9 tokens (Sec. 1): outside that box the factor is extrapolated.

Pure functions, elementwise over numpy arrays or floats.
"""

from __future__ import annotations

import numpy as np

from shardmeter.numeric.ops import Array

__all__ = [
    "KAPLAN_B_STAR_TOKENS",
    "KAPLAN_ALPHA_B",
    "KAPLAN_RANGE",
    "steps_factor",
    "batch_factor",
    "kaplan_loss",
    "kaplan_critical_batch_tokens",
]

# --- Kaplan et al. 2020 (arXiv 2001.08361) -------------------------------------------------
#: Eq. 1.4: B_crit(L) = B* / L^(1/alpha_B), B* in tokens.
KAPLAN_B_STAR_TOKENS = 2.0e8
KAPLAN_ALPHA_B = 0.21
#: Eq. 1.5 with Table 2's joint fit: L(N, D) = [(N_c/N)^(alpha_N/alpha_D) + D_c/D]^alpha_D.
KAPLAN_N_C = 6.4e13
KAPLAN_D_C = 1.8e13
KAPLAN_ALPHA_N = 0.076
KAPLAN_ALPHA_D = 0.103
#: The runs the fits come from (Sec. 1): non-embedding parameters and tokens, ``[low, high]``.
KAPLAN_RANGE: dict[str, tuple[float, float]] = {
    "params_non_embedding": (768.0, 1.5e9),
    "tokens": (22e6, 23e9),
}


def steps_factor(batch: Array, critical: Array) -> np.ndarray:
    """``S / S_min = 1 + B_crit / B`` (McCandlish et al. 2018, Eq. 2.11): steps to a loss with
    batch ``batch`` over the fewest steps any batch needs (same unit for both)."""
    return 1.0 + np.asarray(critical, dtype=float) / np.asarray(batch, dtype=float)


def batch_factor(batch: Array, critical: Array) -> np.ndarray:
    """``E / E_min = 1 + B / B_crit`` (McCandlish et al. 2018, Eq. 2.11): tokens to a loss with
    batch ``batch`` over the tokens a small batch needs (same unit for both)."""
    return 1.0 + np.asarray(batch, dtype=float) / np.asarray(critical, dtype=float)


def kaplan_loss(params_non_embedding: Array, tokens: Array) -> np.ndarray:
    """Kaplan et al. 2020 Eq. 1.5: the loss (nats) of ``N`` non-embedding parameters trained on
    ``D`` tokens."""
    n = np.asarray(params_non_embedding, dtype=float)
    d = np.asarray(tokens, dtype=float)
    return ((KAPLAN_N_C / n) ** (KAPLAN_ALPHA_N / KAPLAN_ALPHA_D) + KAPLAN_D_C / d) ** KAPLAN_ALPHA_D


def kaplan_critical_batch_tokens(loss: Array) -> np.ndarray:
    """Kaplan et al. 2020 Eq. 1.4: the critical batch (tokens) at loss ``L`` (nats)."""
    return KAPLAN_B_STAR_TOKENS / np.asarray(loss, dtype=float) ** (1.0 / KAPLAN_ALPHA_B)

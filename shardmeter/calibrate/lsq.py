"""The least squares the calibration fits share, all on relative residuals ``(model - measured)
/ measured``, so that a 20 us latency point and a 20 ms bandwidth point weigh alike.

* :func:`linear_relative` -- a model linear in its unknowns, ``t_i = sum_j a_ij x_j`` with
  ``x >= 0`` (``numpy.linalg.lstsq`` on the rows divided by ``t_i``; a negative unknown is set
  to 0 and the others refitted: the active-set step of Lawson and Hanson's NNLS);
* :func:`scalar_relative` -- one bounded unknown in any model ``f(x)``: a grid, then golden
  section around its best point;
* :func:`gauss_newton_relative` -- several bounded unknowns in any model: Levenberg-Marquardt
  (damped Gauss-Newton) with a forward-difference Jacobian, steps clipped to the bounds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["linear_relative", "scalar_relative", "gauss_newton_relative", "rel_errors"]


def rel_errors(pred, meas) -> np.ndarray:
    """``(pred - meas) / meas``, elementwise."""
    meas = np.asarray(meas, dtype=float)
    return (np.asarray(pred, dtype=float) - meas) / meas


def linear_relative(a: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``x >= 0`` minimising ``sum_i ((a_i . x - t_i) / t_i)^2``."""
    a = np.asarray(a, dtype=float)
    t = np.asarray(t, dtype=float)
    w = a / t[:, None]
    free = np.ones(a.shape[1], dtype=bool)
    x = np.zeros(a.shape[1])
    for _ in range(a.shape[1]):
        sol, *_ = np.linalg.lstsq(w[:, free], np.ones(len(t)), rcond=None)
        x[:] = 0.0
        x[free] = sol
        if np.all(x >= 0.0):
            return x
        free &= x > 0.0
        if not free.any():
            break
    return np.maximum(x, 0.0)


def scalar_relative(f: Callable[[float], np.ndarray], t: np.ndarray, lo: float, hi: float) -> float:
    """``x`` in ``[lo, hi]`` minimising ``sum ((f(x) - t) / t)^2``: a grid of 200 points, then
    golden section on the bracket around the best."""
    t = np.asarray(t, dtype=float)

    def cost(x: float) -> float:
        return float(np.sum(rel_errors(f(x), t) ** 2))

    grid = np.linspace(lo, hi, 200)
    costs = [cost(float(x)) for x in grid]
    i = int(np.argmin(costs))
    a, b = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, len(grid) - 1)])
    g = (np.sqrt(5.0) - 1.0) / 2.0
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = cost(c), cost(d)
    for _ in range(60):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = cost(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = cost(d)
    return (a + b) / 2.0


def gauss_newton_relative(
    residuals: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    lo: float,
    hi: float,
    *,
    iterations: int = 30,
    step: float = 1e-3,
) -> np.ndarray:
    """``x`` in ``[lo, hi]^p`` minimising ``sum residuals(x)^2`` (the residuals already
    relative), by Levenberg-Marquardt: solve ``(J'J + mu diag(J'J)) dx = -J'r``, accept a step
    that lowers the sum (``mu / 3``), else raise ``mu`` (x 4)."""
    x = np.clip(np.asarray(x0, dtype=float), lo, hi)
    r = residuals(x)
    cost = float(r @ r)
    mu = 1e-3
    for _ in range(iterations):
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            h = step if x[j] + step <= hi else -step
            xp = x.copy()
            xp[j] += h
            jac[:, j] = (residuals(xp) - r) / h
        jtj = jac.T @ jac
        g = jac.T @ r
        improved = False
        for _ in range(8):
            dx = np.linalg.solve(jtj + mu * np.diag(np.diag(jtj)) + 1e-12 * np.eye(len(x)), -g)
            xn = np.clip(x + dx, lo, hi)
            rn = residuals(xn)
            cn = float(rn @ rn)
            if cn < cost:
                improved = True
                done = float(np.max(np.abs(xn - x))) < 1e-6
                x, r, cost, mu = xn, rn, cn, mu / 3.0
                break
            mu *= 4.0
        if not improved or done:
            break
    return x

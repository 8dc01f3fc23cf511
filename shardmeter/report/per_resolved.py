"""What a report reads of the resolved scenario alone: the figures of :func:`build_report
<shardmeter.report.build.build_report>` that depend on nothing but the :class:`Resolved` (its
islands' prices and layouts, the GPUs, the notes on them, the sync strategy's notes, the
confidence band's features), each worked out on first use and then kept with it.

Load once, estimate many: an :class:`~shardmeter.Estimator` keeps one
:class:`ReportFigures` beside the Resolved it prepared for a loaded Scenario, so estimating that
same Scenario object again reuses them; another Scenario (a modified one is another object:
scenarios are frozen) is resolved again and gets figures of its own. ``build_report`` called
without figures works them out afresh. A Resolved is frozen and the figures hold a reference to
it (:attr:`ReportFigures.res`), so they can never describe another scenario; the report copies
every dict and list it takes from them.
"""

from __future__ import annotations

import functools
from typing import Any

from shardmeter.report.confidence import features_of, static_band
from shardmeter.report.layout import IslandLayout, island_layout
from shardmeter.report.pricing import IslandPrice, island_prices
from shardmeter.report.words import sync_notes
from shardmeter.resolve.resolver import Resolved

__all__ = ["ReportFigures"]


class ReportFigures:
    """The report's figures of one :class:`Resolved` (``res``), each computed where a report
    first reads it (``functools.cached_property``: afterwards a plain attribute), as
    :func:`~shardmeter.report.build.build_report` computed it before."""

    def __init__(self, res: Resolved):
        self.res = res
        #: the last ``(params, static band)`` of :meth:`band`
        self._band: tuple[float, dict[str, Any]] | None = None

    @functools.cached_property
    def gpus(self) -> int:
        """The GPUs the plan uses, over all islands."""
        return int(sum(isl.gpus_used for isl in self.res.islands))

    @functools.cached_property
    def memory_capacity_gb(self) -> float:
        """The smallest GPU's memory."""
        return min(isl.gpu.memory_gb for isl in self.res.islands)

    @functools.cached_property
    def used_notes(self) -> tuple[str, ...]:
        """A feasible report's note on each island that leaves some of its GPUs idle."""
        return tuple(
            f"island '{isl.name}' uses {isl.gpus_used} of its {isl.gpus} GPUs"
            for isl in self.res.islands
            if isl.gpus_used < isl.gpus
        )

    @functools.cached_property
    def any_micro_batch(self) -> bool:
        """Whether any island sets its own ``micro_batch``."""
        return any(isl.micro_batch is not None for isl in self.res.scenario.islands)

    @functools.cached_property
    def prices(self) -> tuple[IslandPrice, ...]:
        """Each island's :func:`~shardmeter.report.pricing.island_prices`."""
        return island_prices(self.res)

    @functools.cached_property
    def gpu_names(self) -> tuple[str, ...]:
        """Each island's GPU."""
        return tuple(isl.gpu.name for isl in self.res.islands)

    @functools.cached_property
    def unpriced_notes(self) -> tuple[str, ...]:
        """Each island's note when it has no GPU-hour price."""
        return tuple(
            f"island '{isl.name}': no GPU-hour price for '{isl.gpu.name}' in cost source "
            f"'{isl.cost.name if isl.cost else 'none'}'; cost_usd is null"
            for isl in self.res.islands
        )

    @functools.cached_property
    def steps(self) -> float | None:
        """The run's steps, ``training.tokens / (global_batch x seq_len)`` (None without tokens)."""
        sc = self.res.scenario
        tokens = sc.training.tokens
        return tokens / (sc.training.global_batch * sc.model.seq_len) if tokens else None

    @functools.cached_property
    def layouts(self) -> tuple[IslandLayout, ...]:
        """Each island's :func:`~shardmeter.report.layout.island_layout`."""
        return tuple(island_layout(self.res, isl, j) for j, isl in enumerate(self.res.islands))

    @functools.cached_property
    def sync_notes(self) -> tuple[str, ...]:
        """:func:`~shardmeter.report.words.sync_notes`."""
        return tuple(sync_notes(self.res))

    def band(self, params: float) -> dict[str, Any]:
        """:func:`~shardmeter.report.confidence.static_band` of the features of :attr:`gpus` GPUs
        on ``params`` parameters (the last one kept: the same model gives the same count)."""
        last = self._band
        if last is not None and last[0] == params:
            return last[1]
        st = static_band(features_of(self.res, self.gpus, params))
        self._band = (params, st)
        return st

"""The ``sweep``, ``plan`` and ``sensitivity`` sub-commands (registered by
:mod:`shardmeter.cli.app` when this module exists): their arguments. What each runs is in
:mod:`.commands`, the tables they print in :mod:`.sweep_table` and :mod:`.plan_table`, the
sweep's CSV in :mod:`.sweep_csv`."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from shardmeter.explore.commands import cmd_plan, cmd_sensitivity, cmd_sweep
from shardmeter.explore.formats.sweep_csv import CSV_FIELDS
from shardmeter.numbers import number_argument

__all__ = ["add_sweep_parser", "add_plan_parser", "add_sensitivity_parser", "CSV_FIELDS"]

#: A sub-command: parsed arguments -> exit code.
Command = Callable[[argparse.Namespace], int]
if TYPE_CHECKING:  # what ``add_subparsers`` returns, that each ``add_*_parser`` adds its sub-command to
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def _common(p: argparse.ArgumentParser, *, workers: bool = True) -> None:
    p.add_argument("file", help="scenario TOML file")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario key (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    if workers:
        p.add_argument("--workers", type=_positive_int, metavar="N", help="score chunks on N local processes")
        p.add_argument(
            "--dask",
            metavar="ADDRESS",
            help="score chunks on a dask.distributed cluster: the scheduler's tcp://HOST:PORT or "
            "HOST:PORT ('local' starts a LocalCluster)",
        )
        p.add_argument(
            "--dask-timeout",
            type=_positive_float,
            metavar="SECONDS",
            help="give up on the --dask scheduler if it does not answer within SECONDS "
            "(default $SHARDMETER_DASK_TIMEOUT, else 30)",
        )


#: ``--top``, ``--max-gpus``, ``--chunk``, ``--workers``: whole numbers >= 1 in ASCII digits
#: (the one number check, :func:`shardmeter.numbers.number_argument`).
_positive_int = number_argument(integer=True, minimum=1, maximum=2**40)  # load.specs.MAX_COUNT

#: ``--budget-usd``, ``--deadline-days``, ``--dask-timeout``, ``--step``: finite numbers > 0.
_positive_float = number_argument(integer=False, above=0.0)


def _with_dask_timeout(cmd: Command) -> Command:
    """``cmd`` run with ``--dask-timeout`` as the executors' timeout for reaching a scheduler
    (restored afterwards, so one command line's value does not leak into the next ``main``)."""

    @functools.wraps(cmd)
    def run(args: argparse.Namespace) -> int:
        from shardmeter.explore.execution.executors import (
            dask_timeout_override,  # deferred, as the commands defer theirs
        )

        with dask_timeout_override(getattr(args, "dask_timeout", None)):
            return cmd(args)

    return run


def add_sweep_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "sweep",
        help="evaluate a grid of scenario variants (--vary), with scaling analysis",
        description="Vary one or more keys over lists or ranges (a..bxk geometric, a..b+k "
        "arithmetic, a..b step 1); several --vary form a grid. The scenario is parsed and resolved "
        "once and the grid scored in vectorised batches; the table shows the first rows, --csv and "
        "--json every row.",
        epilog="example:\n  shardmeter sweep examples/studies/scale-nodes.toml "
        "--vary 'training.global_batch=64..4096+64' --vary 'island[0].nodes=1..64' --csv out.csv",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p)
    p.add_argument(
        "--vary",
        action="append",
        required=True,
        metavar="KEY=VALUES",
        help="KEY=V1,V2,... or KEY=a..bxk (geometric) or KEY=a..b+k (arithmetic); repeatable",
    )
    p.add_argument("--csv", metavar="OUT", help="write one row per grid point to OUT (atomically)")
    p.add_argument(
        "--plot", metavar="OUT.png", help="plot throughput and efficiency (needs shardmeter[plot])"
    )
    p.add_argument("--resume", action="store_true", help="with --csv: skip grid points already in OUT")
    p.set_defaults(func=_with_dask_timeout(cmd_sweep))


def add_sensitivity_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "sensitivity",
        help="rank inputs (GPU, memory, links, price) by the throughput a small change of each buys",
        description="Change each input by --step on every island (GPU peak FLOP/s, memory bandwidth "
        "and capacity, each tier's bandwidth and latency, the WAN link's, the price per GPU-hour; "
        "latencies lower) in one batch of the model, and rank them by the throughput each buys, "
        "with its cost elasticity and the memory left free.",
        epilog="example:\n  shardmeter sensitivity examples/gpt3-175b-a100.toml --step 0.05",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p, workers=False)
    p.add_argument(
        "--step",
        type=_fraction,
        default=None,
        metavar="FRACTION",
        help="relative change of each input, > 0 and < 1 (default 0.1: 10 %%)",
    )
    p.set_defaults(func=cmd_sensitivity)


def _fraction(text: str) -> float:
    v = _positive_float(text)
    if v >= 1:
        raise argparse.ArgumentTypeError(f"expected a relative change > 0 and < 1 (0.1 is 10 %), got {text}")
    return v


#: ``plan --objective`` (the planner's ``OBJECTIVES``, spelled here so that building the parser
#: does not import the planner; a test keeps the two equal).
PLAN_OBJECTIVES = (
    "time",
    "cost",
    "pareto",
    "time-to-quality",
    "cost-to-quality",
    "time-pessimistic",
    "cost-pessimistic",
    "expected-time",
    "expected-cost",
    "p90-time",
)


def add_plan_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "plan",
        help="search every layout for the fastest, cheapest or Pareto-best plans",
        description="Score every layout of the scenario's model and cluster (tp, pp, dp, cp, ep, "
        "micro-batch, schedule, recompute, sharding; with several islands the nodes of each and the "
        "sync) and return the fastest, the cheapest or the Pareto front of wall-clock against cost.",
        epilog="example:\n  shardmeter plan examples/multi-island/three-islands.toml --layouts per-island "
        "--objective pareto",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p)
    p.add_argument(
        "--objective",
        choices=PLAN_OBJECTIVES,
        default="time",
        help="rank by wall-clock time or by dollar cost, return the time/cost Pareto front, rank "
        "by time or cost to data-parallel quality (the convergence model's tokens factor), or by "
        "time or cost at the slow end of each plan's confidence band (-pessimistic; one island), by "
        "the expected wall-clock or cost under failures, preemption and stragglers (expected-), or by "
        "the 90th-percentile step (p90-time)",
    )
    p.add_argument("--top", type=_positive_int, default=10, metavar="K", help="plans to return (default 10)")
    p.add_argument("--max-gpus", type=_positive_int, metavar="N", help="use at most N GPUs in total")
    p.add_argument(
        "--budget-usd", type=_positive_float, metavar="X", help="drop plans costing more (needs tokens)"
    )
    p.add_argument(
        "--deadline-days",
        type=_positive_float,
        metavar="D",
        help="drop plans taking longer (needs training.tokens)",
    )
    p.add_argument(
        "--only",
        action="append",
        metavar="KNOB=V1,V2",
        help="restrict a knob (tp, pp, dp, cp, ep, sp, mbs, schedule, v, recompute, sharding, strategy, "
        "inner_steps, bits, island[i].nodes); KNOB alone keeps the scenario's value",
    )
    p.add_argument("--chunk", type=_positive_int, default=None, help="candidates per task (default 262144)")
    p.add_argument(
        "--csv",
        metavar="OUT",
        help="write one row per returned plan to OUT (atomically): rank, objective, time, cost, "
        "each island's nodes, layout and share",
    )
    p.add_argument(
        "--plot",
        metavar="OUT.png",
        help="draw wall-clock against cost: the Pareto front and the returned plans by rank "
        "(.png or .svg; needs shardmeter[plot])",
    )
    p.add_argument(
        "--layouts",
        choices=("shared", "per-island"),
        default=None,
        help="several islands: each island its own layout, node count and balanced batch share "
        "(per-island, the default), or one layout on every island split by replicas (shared)",
    )
    p.set_defaults(func=_with_dask_timeout(cmd_plan))

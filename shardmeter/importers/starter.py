"""``shardmeter init``: a commented starter scenario that ``estimate`` runs as it is.

The model comes from a bundled preset (``--preset``) or a Hugging Face ``config.json``
(``--hf-config``, read by :mod:`shardmeter.load.hf_config`); the GPUs from ``--gpu`` and ``--gpus``
(:func:`shardmeter.importers.island.island_table`). The batch is about 4 M tokens per step
(:data:`STARTER_BATCH_TOKENS`) unless ``--global-batch`` says otherwise. The layout is the
fastest that the planner (:func:`shardmeter.explore.search.plan.search`, the same search as ``shardmeter
plan``) finds for that model on those GPUs, so the starter fits in memory; where none fits, the
error names ``--gpus``.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from shardmeter.errors import ScenarioError, ShardMeterError
from shardmeter.importers.draft import Draft
from shardmeter.importers.island import island_table, node_size

__all__ = ["starter_draft", "apply_plan", "starter_batch", "add_init_parser", "STARTER_BATCH_TOKENS"]

#: Tokens per optimizer step of a starter: 4 M, the batch Llama 3 405B started pre-training with
#: (Llama 3 paper, arXiv 2407.21783, section 3.4.1: "an initial batch size of 4M tokens"), close
#: to GPT-3 175B's 3.2 M (Brown et al. 2020, Table 2.1).
STARTER_BATCH_TOKENS = 4 * 1024 * 1024

#: What each key of the layout means, written beside it.
_MEANING = {
    "tp": "tensor parallel: each layer's matrices split over this many GPUs",
    "pp": "pipeline parallel: the layers split into this many stages",
    "dp": "data parallel: model replicas (tp x pp x cp x dp = the GPUs)",
    "cp": "context parallel: each sequence split over this many GPUs",
    "ep": "expert parallel: MoE experts spread over this many GPUs",
    "sequence_parallel": "norms and dropout split along the sequence with tp (Megatron-LM --sequence-parallel)",
    "sharding": "optimizer/gradient/weight sharding over dp: none | zero1 | zero2 | zero3 | fsdp | hsdp",
    "schedule": "pipeline schedule: gpipe | 1f1b | interleaved",
    "virtual_stages": "interleaved: model chunks per pipeline stage",
}


def starter_batch(seq_len: int) -> int:
    """Sequences per step of a starter: :data:`STARTER_BATCH_TOKENS` / ``seq_len`` rounded to a
    power of two (1024 at 4096 tokens, 512 at 8192), at least 1."""
    return max(1, 2 ** round(math.log2(max(STARTER_BATCH_TOKENS / seq_len, 1))))


def starter_draft(
    model: dict[str, Any],
    model_why: dict[str, str],
    *,
    gpu: str | None,
    gpus: int,
    seq_len: int,
    global_batch: int | None = None,
    kind: str = "init",
    file: str = "",
) -> Draft:
    """A draft of ``model`` (``seq_len`` tokens per sequence) on ``gpus`` GPUs of ``gpu`` (no
    layout yet: :func:`apply_plan`)."""
    d = Draft(kind=kind, file=file)
    for k, v in model.items():
        d.set(f"model.{k}", v, model_why.get(k, ""))
    seq = seq_len
    if global_batch is not None:
        d.set("training.global_batch", global_batch, "--global-batch")
    else:
        gb = starter_batch(seq)
        d.set(
            "training.global_batch",
            gb,
            f"sequences per step: about 4 M tokens ({gb} x {seq}), Llama 3's starting batch",
        )
    d.note("training", "tokens = 1.0e12          # tokens to train: gives the wall-clock time and the cost")
    d.note(
        "training",
        'precision = "bf16" (default) | "fp8" | "fp16" | "tf32" | "fp32"; attention = "flash" (default)',
    )
    island, why = island_table(gpu, gpus)
    for k, v in island.items():
        d.set(f"island.{k}", v, why.get(k, ""))
    d.note(
        "island",
        'price = "cloud-on-demand" (default) | "owned"; links: intra_node, inter_node or tiers (docs/scenario.md)',
    )
    d.world = gpus
    return d


def apply_plan(d: Draft, registry=None) -> dict[str, Any]:
    """Fill ``d``'s layout (``[parallelism]``, ``training.micro_batch`` and ``recompute``) with
    the fastest feasible plan of ``shardmeter plan``; returns the plan document. No feasible
    plan is an error naming ``--gpus``."""
    from shardmeter.estimator import Estimator
    from shardmeter.explore.search.plan import search

    tables: dict[str, Any] = {t: dict(v) for t, v in d.tables.items() if v and t in ("model", "training")}
    tables["island"] = [dict(d.tables["island"])]
    try:
        # partial=False: Ctrl-C is an interruption (exit 130, nothing written), not a layout
        doc = search(tables, estimator=Estimator(registry), top=1, partial=False)
    except ScenarioError as exc:
        raise ShardMeterError(f"the starter scenario does not load: {exc}") from None
    if not doc["plans"]:
        top = max(doc.get("infeasible", {}).items(), key=lambda kv: kv[1], default=("", 0))[0]
        gb = d.get("training.global_batch")
        raise ShardMeterError(
            f"--gpus {d.world}: no layout of this model fits {d.get('island.gpu')} x {d.world} "
            f"with a global batch of {gb} (most plans fail on {top or 'memory'}); give more GPUs"
        )
    plan = doc["plans"][0]
    src = f"fastest of {doc['feasible']:,} feasible layouts (shardmeter plan)"
    for k in ("micro_batch", "recompute"):
        if k in plan["training"]:
            d.set(
                f"training.{k}", plan["training"][k], src if k == "micro_batch" else "chosen with the layout"
            )
    for k, v in plan["parallelism"].items():
        if k in _MEANING:
            d.set(f"parallelism.{k}", v, _MEANING[k])
    report = plan["report"]
    d.note(
        "parallelism",
        f"layout: {src}; predicted {report['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, "
        f"{report['memory_per_gpu_gb']:.1f} of {report['memory_capacity_gb']:.0f} GB per GPU",
    )
    d.note(
        "parallelism",
        "explore: shardmeter plan FILE --top 5; shardmeter sweep FILE --vary parallelism.tp=1,2,4,8",
    )
    return doc


def _model_from_args(args) -> tuple[dict[str, Any], dict[str, str], str, int]:
    """The ``[model]`` keys, a comment per key, the header line naming the model's source and
    the sequence length."""
    if args.preset is not None:
        from shardmeter.load.files import model_presets

        presets = model_presets()
        if args.preset not in presets:
            import difflib

            close = difflib.get_close_matches(args.preset, list(presets), n=3, cutoff=0.5)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise ShardMeterError(
                f"--preset: unknown model preset {args.preset!r}{hint}; bundled: {', '.join(presets)}"
            )
        src = presets[args.preset].get("source", "")
        return (
            {"preset": args.preset},
            {"preset": f"bundled: shardmeter/presets/models.toml ({src})" if src else "bundled preset"},
            f"Model: the bundled preset {args.preset}; any [model] key written below it overrides it.",
            int(presets[args.preset]["seq_len"]),
        )
    from shardmeter.importers.files import ConfigError, read_json
    from shardmeter.load.hf_config import model_table_from_hf

    cfg, name = read_json(args.hf_config)
    try:
        table, notes = model_table_from_hf(cfg)
    except ScenarioError as exc:
        raise ConfigError(name, exc.message) from None
    why = {k: "config.json" for k in table}
    args._hf_notes = notes
    return table, why, f"Model: the Hugging Face config {os.path.basename(name)}.", int(table["seq_len"])


def _run(args) -> int:
    from shardmeter.importers.cli import write_output
    from shardmeter.importers.toml_out import render

    if args.preset is None and args.hf_config is None:
        args.preset = "llama3-8b"
    if args.output is not None:
        from shardmeter.io import check_output

        inputs = [p for p in (args.hf_config,) if p]
        check_output(args.output, label="-o", inputs=inputs)
    model, why, line, seq = _model_from_args(args)
    gpus = args.gpus if args.gpus is not None else node_size(args.gpu)
    d = starter_draft(model, why, gpu=args.gpu, gpus=gpus, seq_len=seq, global_batch=args.global_batch)
    for n in getattr(args, "_hf_notes", []):
        d.note("model", n)
    d.header = [
        "Starter scenario written by `shardmeter init`; run `shardmeter estimate` on this file.",
        line,
        f"GPUs: {gpus} x {args.gpu}"
        + ("" if args.gpus is not None else " (one node: give --gpus N for more)")
        + ".",
        "Every key is documented in docs/scenario.md; change any of them, or override with --set KEY=VALUE.",
    ]
    apply_plan(d)
    write_output(render(d), args.output)
    return 0


EPILOG = """\
examples:
  shardmeter init --preset llama3-8b
  shardmeter init --preset llama3-70b --gpu h100-sxm --gpus 64 -o llama70b.toml
  shardmeter init --hf-config config.json --gpu a100-sxm-80gb --gpus 16 -o run.toml
  shardmeter init --preset gpt3-175b --gpus 1024 | shardmeter estimate -
"""


def _whole(what: str):
    """An argparse type: a whole number >= 1 in ASCII digits, its error naming ``what``
    (:func:`shardmeter.numbers.number_argument`)."""
    from shardmeter.numbers import number_argument

    return number_argument(integer=True, minimum=1, maximum=2**40, noun=what)  # load.specs.MAX_COUNT


gpu_count = _whole("GPUs")


def add_init_parser(sub) -> None:
    from shardmeter.io import FILE

    p = sub.add_parser(
        "init",
        help="write a commented starter scenario (a preset or a config.json, on your GPUs)",
        description="Write a starter scenario: the model of --preset or --hf-config, on --gpus GPUs "
        "of --gpu, with a batch of about 4 M tokens and the fastest layout that fits in memory "
        "(found by the planner). Every key is commented; `shardmeter estimate` runs it as it is.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--preset", metavar="NAME", help="a bundled model (default llama3-8b; see docs/scenario.md)"
    )
    src.add_argument("--hf-config", metavar="FILE", help="a Hugging Face config.json").complete = FILE
    p.add_argument(
        "--gpu", metavar="NAME", default="h100-sxm", help="a GPU name (default h100-sxm; shardmeter plugins)"
    )
    p.add_argument("--gpus", metavar="N", type=gpu_count, help="GPUs in all (default: one node of --gpu)")
    p.add_argument(
        "--global-batch",
        metavar="N",
        type=_whole("sequences"),
        help="sequences per step (default: about 4 M tokens)",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help="write the scenario to FILE (default: standard output)"
    ).complete = FILE
    p.set_defaults(func=_run, preset=None)

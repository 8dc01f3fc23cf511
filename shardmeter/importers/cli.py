"""The ``shardmeter import`` sub-command: a framework's configuration as a scenario on stdout
(or ``-o FILE``, written atomically and never over the configuration itself)."""

from __future__ import annotations

import argparse
import importlib
import sys

from shardmeter.importers import FORMATS
from shardmeter.importers.draft import Draft
from shardmeter.importers.island import island_table, node_size
from shardmeter.importers.toml_out import render

__all__ = ["add_import_parser", "import_config", "write_output"]


def write_output(text: str, output: str | None, *, inputs=()) -> None:
    """``text`` on stdout, or into ``output`` (:func:`shardmeter.io.atomic_write`)."""
    if output is None:
        sys.stdout.write(text)
        return
    from shardmeter.io import atomic_write, check_output

    check_output(output, label="-o", inputs=inputs)
    with atomic_write(output, label="-o") as fh:
        fh.write(text)


def import_config(kind: str, path: str, *, gpu: str | None = None, gpus: int | None = None) -> str:
    """The commented scenario TOML of the ``kind`` configuration at ``path`` (see
    :data:`~shardmeter.importers.FORMATS`)."""
    mod, fn = FORMATS[kind].split(":")
    reader = getattr(importlib.import_module(mod), fn)
    d: Draft = reader(path, gpus=gpus, node=node_size(gpu))
    island, why = island_table(gpu, d.world)
    for k, v in island.items():
        d.set(f"island.{k}", v, why.get(k, ""))
    if gpus is None:
        d.why["island.nodes"] = f"{d.world_why}" if d.world_why else why["nodes"]
    if gpu is None:
        d.note("island", "the configuration does not say which GPUs or links: give --gpu NAME --gpus N")
    d.note("island", "links: the GPU's usual intra_node / inter_node, or tiers = [...] (docs/scenario.md)")
    if kind == "hf" and gpu is not None:
        from shardmeter.importers.starter import apply_plan

        apply_plan(d)
    return render(d)


def _run(args) -> int:
    if args.output is not None:
        from shardmeter.io import check_output

        check_output(args.output, label="-o", inputs=[args.file])
    text = import_config(args.format, args.file, gpu=args.gpu, gpus=args.gpus)
    write_output(text, args.output, inputs=[args.file])
    return 0


EPILOG = """\
examples:
  shardmeter import torchtitan llama3_8b.toml --gpu h100-sxm --gpus 64 -o run.toml
  shardmeter import megatron train_args.txt --gpu h100-sxm --gpus 1024
  shardmeter import hf config.json --gpu a100-sxm-80gb --gpus 16 | shardmeter estimate -

torchtitan: a job TOML (--job.config_file). megatron: a file of Megatron-LM arguments
(the --flag value lines of its shell scripts; $VARIABLES are reported, not expanded).
hf: a Hugging Face config.json (the model only; the batch is about 4 M tokens and,
with --gpu, the layout is the planner's fastest). Details: docs/importing.md.
"""


def add_import_parser(sub) -> None:
    from shardmeter.importers.starter import gpu_count as _gpus
    from shardmeter.io import FILE

    p = sub.add_parser(
        "import",
        help="write a scenario from a torchtitan, Megatron-LM or Hugging Face config",
        description="Print a scenario made from a framework's configuration: every setting it "
        "understands mapped to a scenario key (with the setting named beside it), a comment for "
        "each it does not, and for what the configuration cannot say (the GPUs, the links).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("format", metavar="FORMAT", choices=tuple(FORMATS), help="hf, torchtitan or megatron")
    p.add_argument("file", metavar="FILE", help="the configuration file").complete = FILE
    p.add_argument(
        "--gpu", metavar="NAME", help="the GPU it runs on (without it: a placeholder estimate rejects)"
    )
    p.add_argument("--gpus", metavar="N", type=_gpus, help="GPUs in all (the world size)")
    p.add_argument(
        "-o", "--output", metavar="FILE", help="write the scenario to FILE (default: standard output)"
    ).complete = FILE
    p.set_defaults(func=_run)

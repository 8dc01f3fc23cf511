"""The ``shardmeter import`` sub-command: a framework's configuration as a scenario on stdout
(or ``-o FILE``, written atomically and never over the configuration itself).

What it writes always loads: the rendered TOML is loaded back (:func:`check_loads`) before it is
printed, and where it would not load the import ends with one line naming what to add."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from shardmeter.errors import ScenarioError, ShardMeterError
from shardmeter.importers import FORMATS
from shardmeter.importers.draft import Draft
from shardmeter.importers.island import island_table, node_size
from shardmeter.importers.toml_out import render

__all__ = ["add_import_parser", "import_config", "write_output", "check_loads", "parse_var"]


def write_output(text: str, output: str | None, *, inputs=()) -> None:
    """``text`` on stdout, or into ``output`` (:func:`shardmeter.io.atomic_write`)."""
    if output is None:
        sys.stdout.write(text)
        return
    from shardmeter.io import atomic_write, check_output

    check_output(output, label="-o", inputs=inputs)
    with atomic_write(output, label="-o") as fh:
        fh.write(text)


def parse_var(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` of ``--var`` (a shell variable the script reads from outside)."""
    name, eq, value = text.partition("=")
    name = name.strip()
    if not eq or not name or not (name.isidentifier() or name.isdigit()) or not name.isascii():
        raise ShardMeterError(f"--var expects NAME=VALUE (a shell variable name), got {text[:60]!r}")
    return name, value


def import_config(
    kind: str,
    path: str,
    *,
    gpu: str | None = None,
    gpus: int | None = None,
    config: str | None = None,
    variables: Mapping[str, str] | None = None,
    sets: Sequence[Any] = (),
) -> str:
    """The commented scenario TOML of the ``kind`` configuration at ``path`` (see
    :data:`~shardmeter.importers.FORMATS`); ``config`` names the function of a Python registry
    or recipe, ``variables`` give shell variables set outside a script, ``sets`` are
    ``KEY=VALUE`` items (or pairs) written into the scenario."""
    mod, fn = FORMATS[kind].split(":")
    reader = getattr(importlib.import_module(mod), fn)
    d: Draft = reader(path, gpus=gpus, node=node_size(gpu), config=config, variables=dict(variables or {}))
    island, why = island_table(gpu, d.world)
    for k, v in island.items():
        d.set(f"island.{k}", v, why.get(k, ""))
    if gpus is None:
        d.why["island.nodes"] = f"{d.world_why}" if d.world_why else why["nodes"]
    if gpu is None:
        d.note("island", "the configuration does not say which GPUs or links: give --gpu NAME --gpus N")
    d.note("island", "links: the GPU's usual intra_node / inter_node, or tiers = [...] (docs/scenario.md)")
    _apply_sets(d, sets)
    _check_needs(d)
    if d.kind == "hf" and gpu is not None:
        from shardmeter.importers.starter import apply_plan

        apply_plan(d)
    text = render(d)
    check_loads(text, d.file)
    return text


def _apply_sets(d: Draft, sets: Sequence[Any]) -> None:
    import re

    from shardmeter.importers.toml_out import toml_value
    from shardmeter.load.overrides import parse_override

    for item in sets:
        key, value = parse_override(item) if isinstance(item, str) else item
        m = re.fullmatch(r"(model|training|parallelism|source|island(?:\[0\])?)\.([A-Za-z_]\w*)", key)
        if not m:
            raise ShardMeterError(
                f"--set {key}: import writes keys of [model], [training], [parallelism], [source] and "
                "the island (model.vocab=N, island.gpu=NAME); edit other keys in the file"
            )
        try:  # what the scenario cannot hold (nan, inf, an inline table) is refused here, by key
            toml_value(value)
        except (TypeError, ValueError) as exc:
            raise ShardMeterError(
                f"--set {key}: {exc}; give a finite number, a string, a boolean or a list of them"
            ) from None
        table = "island" if m.group(1).startswith("island") else m.group(1)
        d.set(f"{table}.{m.group(2)}", value, "--set")


def _check_needs(d: Draft) -> None:
    """One line naming everything the configuration needs from outside (Draft.needs) that no
    ``--set`` gave."""
    from shardmeter.importers.files import ConfigError

    left = [(what, how) for what, (how, key) in d.needs.items() if not (key and d.get(key) is not None)]
    if left:
        raise ConfigError(
            d.file, "needs what the file does not set: " + "; ".join(f"{w} ({h})" for w, h in left)
        )


def check_loads(text: str, file: str) -> None:
    """Raise one line naming ``file`` and the key when the scenario ``text`` does not load."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    from shardmeter.importers.files import ConfigError
    from shardmeter.load.scenario import load_scenario

    try:
        load_scenario(tomllib.loads(text))
    except ScenarioError as exc:
        where = f"{exc.path} " if exc.path else ""
        raise ConfigError(
            file,
            f"the scenario it makes does not load ({where}{exc.message}); give the key with --set KEY=VALUE",
        ) from None


def _run(args) -> int:
    if args.output is not None:
        from shardmeter.io import check_output

        check_output(args.output, label="-o", inputs=[args.file])
    variables = dict(parse_var(v) for v in args.var or ())
    text = import_config(
        args.format,
        args.file,
        gpu=args.gpu,
        gpus=args.gpus,
        config=args.config,
        variables=variables,
        sets=args.set or (),
    )
    write_output(text, args.output, inputs=[args.file])
    return 0


EPILOG = """\
examples:
  shardmeter import torchtitan llama3_8b.toml --gpu h100-sxm --gpus 64 -o run.toml
  shardmeter import torchtitan config_registry.py --config llama3_70b --gpu h100-sxm --gpus 64
  shardmeter import megatron train_gpt3_175b_distributed.sh --var TP=8 --gpu h100-sxm --gpus 1024
  shardmeter import megatron llama3.py --config llama3_8b_pretrain_8gpu_h100_bf16_config
  shardmeter import hf config.json --gpu a100-sxm-80gb --gpus 16 | shardmeter estimate -

torchtitan: a job TOML (--job.config_file) or a config_registry.py (--config: the function).
megatron: a Megatron-LM launch script or file of arguments (the script's own NAME=value and
${NAME:-default} expanded; --var NAME=VALUE gives one set outside it), or a Megatron-Bridge
or NeMo 2 recipe .py (--config: the recipe function). Python files are read, never run.
hf: a Hugging Face config.json (the model only; the batch is about 4 M tokens and,
with --gpu, the layout is the planner's fastest). Details: docs/importing.md.
"""


def add_import_parser(sub) -> None:
    from shardmeter.importers.starter import gpu_count as _gpus
    from shardmeter.io import FILE

    p = sub.add_parser(
        "import",
        help="write a scenario from a torchtitan, Megatron-LM/Bridge/NeMo or Hugging Face config",
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
    p.add_argument("--config", metavar="NAME", help="the function of a Python registry or recipe to import")
    p.add_argument(
        "--var",
        metavar="NAME=VALUE",
        action="append",
        help="a shell variable the script expects from outside (repeatable)",
    )
    p.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        help="write a scenario key the configuration does not give (model.vocab=32000; repeatable)",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help="write the scenario to FILE (default: standard output)"
    ).complete = FILE
    p.set_defaults(func=_run)

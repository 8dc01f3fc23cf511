"""``shardmeter import hf config.json``: a Hugging Face model configuration as a scenario.

The ``[model]`` keys are :func:`shardmeter.load.hf_config.model_table_from_hf`'s, with its notes as
comments. A config.json says nothing about training: the batch is the starter's (about 4 M
tokens, :func:`shardmeter.importers.starter.starter_batch`), and with ``--gpu`` the layout is the fastest
the planner finds (:func:`shardmeter.importers.starter.apply_plan`), as ``shardmeter init`` writes it."""

from __future__ import annotations

import os

from shardmeter.errors import ScenarioError
from shardmeter.importers.draft import Draft
from shardmeter.importers.files import ConfigError, read_json

__all__ = ["draft_from_file"]


def draft_from_file(
    path: str | os.PathLike, *, gpus: int | None = None, node: int = 8, config: str | None = None, **_: object
) -> Draft:
    """The draft scenario of the ``config.json`` at ``path`` on ``gpus`` GPUs (one ``node``
    without it)."""
    from shardmeter.importers.starter import starter_draft
    from shardmeter.load.hf_config import model_table_from_hf

    cfg, name = read_json(path)
    if config is not None:
        raise ConfigError(
            name, "--config names a function of a Python registry or recipe; a config.json is one model"
        )
    try:
        table, notes = model_table_from_hf(cfg)
    except ScenarioError as exc:
        raise ConfigError(name, exc.message) from None
    world = gpus if gpus is not None else node
    d = starter_draft(table, {}, gpu=None, gpus=world, seq_len=int(table["seq_len"]), kind="hf", file=name)
    for key in table:
        d.why[f"model.{key}"] = "config.json"
    d.why["model.seq_len"] = "config.json max_position_embeddings: set the training length"
    for n in notes:
        d.note("model", n)
    d.tables["island"] = {}
    d.why = {k: v for k, v in d.why.items() if not k.startswith("island.")}
    d.notes["island"] = []
    d.world = world
    d.world_why = "--gpus" if gpus is not None else f"one {node}-GPU node: give --gpus N"
    d.header = [
        f"Scenario imported from the Hugging Face config {os.path.basename(name)} by `shardmeter import hf`.",
        "A config.json describes the model only: the batch and the layout below are starting points.",
    ]
    d.set("source.imported_from", f"Hugging Face config {os.path.basename(name)}")
    return d

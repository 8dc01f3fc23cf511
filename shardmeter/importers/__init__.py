"""``shardmeter import``: a scenario written from a training framework's own configuration.

Each reader (:mod:`.torchtitan`, :mod:`.megatron`, :mod:`.hf`) fills a :class:`Draft`: the
scenario keys it could map, each with where its value came from, and a comment for every
setting it could not map and for what the configuration cannot say (the GPUs, the links).
:mod:`.island` adds the ``[[island]]`` from ``--gpu`` / ``--gpus``; :mod:`.toml_out` writes
the commented TOML; :mod:`.cli` is the sub-command. Keys the contract plans but this version
rejects (such as ``training.framework`` before its profiles) are written as ``# planned:``
comments, never as keys, so the scenario always loads. :mod:`.starter` is ``shardmeter init``.

May import: explore (``init`` and ``import --gpu`` run the planner), the estimator and every stage.
Never calibrate or the CLI.
"""

from __future__ import annotations

from shardmeter.importers.draft import Draft

__all__ = ["Draft", "FORMATS"]

#: What ``shardmeter import`` reads: name -> module:function returning a Draft of a file.
FORMATS = {
    "hf": "shardmeter.importers.hf:draft_from_file",
    "torchtitan": "shardmeter.importers.torchtitan:draft_from_file",
    "megatron": "shardmeter.importers.megatron:draft_from_file",
}

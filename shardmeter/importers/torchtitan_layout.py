"""A torchtitan job's parallel layout as ``[parallelism]`` keys (torchtitan's ``ParallelDims``,
``torchtitan/config/job_config.py`` @ 238fa99 and ``torchtitan/config/configs.py`` @ b5bcd76).

``data_parallel_shard_degree`` (``-1``: the GPUs left over) is FSDP, HSDP with
``data_parallel_replicate_degree > 1``, DDP (``sharding = "none"``) when it is 1;
``tensor_parallel_degree`` with sequence parallelism (torchtitan's TP plan shards the norms'
activations, ``SequenceParallel``; ``enable_sequence_parallel`` from b5bcd76 on);
``pipeline_parallel_degree`` and ``_schedule`` (``Interleaved1F1B`` with 2 stages per rank
unless ``pipeline_parallel_layers_per_stage`` says otherwise, as ``pipeline_llm`` does);
``context_parallel_degree``, ``expert_parallel_degree``.
"""

from __future__ import annotations

import math
from typing import Any

from shardmeter.importers.draft import Draft
from shardmeter.importers.files import ConfigError, number
from shardmeter.importers.settings import Settings, shown
from shardmeter.load.specs import MAX_COUNT

__all__ = ["parallelism", "stage_layers", "setting_int"]

#: torchtitan pipeline schedules -> (schedule, looped: several stages per rank).
_SCHEDULES = {"1f1b": ("1f1b", False), "gpipe": ("gpipe", False), "interleaved1f1b": ("interleaved", True)}


def setting_int(s: Settings, path: str, default: int, file: str, minimum: int | None = None) -> int:
    """The integer setting at ``path`` (:func:`shardmeter.numbers.check_number`: finite, in
    range, a whole number), its error one line naming the file and the setting."""
    return int(number(s.take(path, default), field=path, file=file, integer=True, minimum=minimum))


def _degrees(s: Settings, file: str) -> dict[str, int]:
    p = "parallelism."
    return {
        "replicate": setting_int(s, p + "data_parallel_replicate_degree", 1, file),
        "shard": setting_int(s, p + "data_parallel_shard_degree", -1, file),
        "tp": setting_int(s, p + "tensor_parallel_degree", 1, file),
        "pp": setting_int(s, p + "pipeline_parallel_degree", 1, file),
        "cp": setting_int(s, p + "context_parallel_degree", 1, file),
        "ep": setting_int(s, p + "expert_parallel_degree", 1, file),
    }


def _world(g: dict[str, int], gpus: int | None, node: int, file: str) -> tuple[int, int]:
    """(world size, data_parallel_shard_degree) as torchtitan's ``ParallelDims`` resolves them."""
    for k in ("replicate", "tp", "pp", "cp", "ep"):
        if g[k] < 1:
            raise ConfigError(file, f"parallelism: a degree must be >= 1, got {g[k]}")
    if g["shard"] == 0 or g["shard"] < -1:
        raise ConfigError(
            file, f"parallelism.data_parallel_shard_degree: expected -1 or >= 1, got {g['shard']}"
        )
    fixed = g["replicate"] * g["tp"] * g["pp"] * g["cp"]
    if fixed > MAX_COUNT:
        raise ConfigError(file, f"parallelism: the degrees' product {fixed:.3g} is absurdly large")
    if g["shard"] > 0:
        need = fixed * g["shard"]
        if gpus is not None and gpus != need:
            raise ConfigError(
                file,
                f"--gpus {gpus}: the job's degrees use {need} GPUs (replicate x shard x tp x pp x cp; "
                "torchtitan requires their product to be the world size)",
            )
        return need, g["shard"]
    # EP borrows from the data-parallel ranks (and CP): the world holds rep x tp x pp x lcm(cp, ep)
    unit = g["replicate"] * g["tp"] * g["pp"] * math.lcm(g["cp"], g["ep"])
    world = gpus if gpus is not None else math.lcm(node, unit)
    if world % fixed:
        raise ConfigError(
            file,
            f"--gpus {world}: not a multiple of replicate x tp x pp x cp = {fixed}, so "
            "data_parallel_shard_degree = -1 has no whole value",
        )
    return world, world // fixed


def parallelism(s: Settings, d: Draft, file: str, gpus: int | None, node: int) -> int:
    """``[parallelism]`` of the job; returns the world size."""
    g = _degrees(s, file)
    world, shard = _world(g, gpus, node, file)
    d.world = world
    d.world_why = (
        "--gpus"
        if gpus is not None
        else (f"{world} GPUs: the fixed degrees' product on whole {node}-GPU nodes; give --gpus N")
    )
    rep = g["replicate"]
    d.dp = rep * shard
    for k, key in (
        ("tp", "tensor_parallel_degree"),
        ("pp", "pipeline_parallel_degree"),
        ("cp", "context_parallel_degree"),
        ("ep", "expert_parallel_degree"),
    ):
        if g[k] != 1:
            d.set(f"parallelism.{k}", g[k], f"{key}")
    shard_src = "data_parallel_shard_degree" + (" = -1: the GPUs left over" if g["shard"] == -1 else "")
    if shard > 1 and rep > 1:
        d.set("parallelism.sharding", "hsdp", f"{shard_src} ({shard}) x replicate {rep}")
        d.note(
            "parallelism",
            f"hsdp shards inside a node and replicates across nodes; torchtitan shards over "
            f"{shard} ranks and replicates {rep} times",
        )
    elif shard > 1:
        d.set("parallelism.sharding", "fsdp", f"{shard_src} ({shard}): FSDP2 fully_shard")
    else:
        d.set(
            "parallelism.sharding",
            "none",
            "data_parallel_shard_degree 1: " + ("DDP" if rep > 1 else "no data parallelism"),
        )
    if g["shard"] > 0 or gpus is None:
        d.set("parallelism.dp", rep * shard, "replicate x shard" if g["shard"] > 0 else shard_src)
    sp = s.take("parallelism.enable_sequence_parallel", True)
    if g["tp"] > 1:
        if sp is False:
            d.set("parallelism.sequence_parallel", False, "enable_sequence_parallel = false")
        else:
            d.set("parallelism.sequence_parallel", True, "torchtitan's TP plan (SequenceParallel norms)")
    reshard = s.take("parallelism.fsdp_reshard_after_forward", "default")
    if reshard != "default":
        d.unmapped(
            "parallelism",
            f"fsdp_reshard_after_forward = {shown(reshard)}",
            "ShardMeter's fsdp reshards after forward",
        )
    if s.take("parallelism.enable_async_tensor_parallel", False) is True:
        d.planned("parallelism.async_tp", "true", "enable_async_tensor_parallel")
    _schedule(s, d, g, file)
    return world


def _schedule(s: Settings, d: Draft, g: dict[str, int], file: str) -> None:
    p = "parallelism."
    name = s.take(p + "pipeline_parallel_schedule", "1F1B")
    per_stage = s.take(p + "pipeline_parallel_layers_per_stage")
    first = setting_int(s, p + "pipeline_parallel_first_stage_less_layers", 1, file, minimum=0)
    last = setting_int(s, p + "pipeline_parallel_last_stage_less_layers", 1, file, minimum=0)
    if g["pp"] == 1:
        if s.has(p + "pipeline_parallel_schedule"):
            d.note(
                "parallelism",
                f"ignored: pipeline_parallel_schedule = {shown(name)} (pipeline_parallel_degree = 1)",
            )
        return
    known = _SCHEDULES.get(str(name).lower())
    if known is None:
        d.unmapped(
            "parallelism",
            f"pipeline_parallel_schedule = {shown(name)}",
            "no bundled schedule; priced as 1f1b (a plugin may add it: examples/plugins/shardmeter-zero-bubble)",
        )
        return
    schedule, looped = known
    d.set("parallelism.schedule", schedule, f"pipeline_parallel_schedule = {shown(name)}")
    layers = d.get("model.layers")
    if looped:
        if (
            isinstance(per_stage, int)
            and not isinstance(per_stage, bool)
            and per_stage > 0
            and isinstance(layers, int)
        ):
            stages = math.ceil((layers + first + last) / per_stage)
            d.set(
                "parallelism.virtual_stages", max(2, stages // g["pp"]), "pipeline_parallel_layers_per_stage"
            )
        else:
            d.set(
                "parallelism.virtual_stages",
                2,
                "torchtitan's default for a looped schedule: 2 stages per rank",
            )
    v = d.get("parallelism.virtual_stages", 1)
    if isinstance(layers, int) and (first or last):
        split = stage_layers(g["pp"] * v, layers, first, last)
        if split:
            d.planned("parallelism.first_stage_layers", str(split[0]), f"first_stage_less_layers = {first}")
            d.planned("parallelism.last_stage_layers", str(split[-1]), f"last_stage_less_layers = {last}")


def stage_layers(stages: int, layers: int, input_weight: int, output_weight: int) -> list[int]:
    """Transformer layers per pipeline stage as torchtitan's ``generate_llm_fqn_per_model_part``
    splits them: the embedding counts as ``input_weight`` layers and the output as
    ``output_weight``, the remainder goes to the first stages (``[]`` where torchtitan refuses)."""
    effective = layers + input_weight + output_weight
    if stages < 2 or stages > effective:
        return []
    per, extra = divmod(effective, stages)
    if input_weight > per or output_weight > per:
        return []
    out: list[Any] = []
    used = 0
    for i in range(stages):
        want = per + (1 if i < extra else 0) - (input_weight if i == 0 else 0)
        if i == stages - 1:
            out.append(layers - used)
            break
        n = min(max(want, 0), layers - used)
        out.append(n)
        used += n
    return out

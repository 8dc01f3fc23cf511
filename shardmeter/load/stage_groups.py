"""``[[stage_group]]``: one pipeline whose stages run on several islands or GPU types.

Each entry is a *stage group* (Metis, Um et al. ATC'24: a device group and its stage
partition; Sailor, Strati et al. SOSP'25: a stage's GPU type and TP degree): consecutive
pipeline stages on one ``[[island]]``'s GPUs, with their own ``tp``, ``stages`` and ``layers``
(an integer, split over the group's stages as evenly as it goes, the extra layers first; or
one count per stage). The groups run in the order written, the first holding the embedding
and the last the output layer and loss; ``parallelism.dp`` copies the whole pipeline.

The rules, each a one-line error naming the key: the layers of the groups sum to
``model.layers``, each stage holds at least one layer, ``island`` names an ``[[island]]``,
every group takes the same ``micro_batch`` (1F1B hands one micro-batch from stage to stage),
the schedule is ``1f1b`` with one model chunk and no Megatron first/last-stage counts
(the groups' ``layers`` say the split), ``parallelism.pp`` (if not 1) is the stages' sum, the
islands take no layout of their own and ``[sync]`` is not given. That the GPUs the groups
take on each island (``tp x cp x stages x dp``) fit it is checked once the GPUs per node are
known (:mod:`shardmeter.hetero`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from shardmeter.errors import ScenarioError
from shardmeter.load.specs import IslandSpec, ModelSpec, ParallelismSpec, StageGroupSpec, TrainingSpec
from shardmeter.registry.convert import structure_record

__all__ = ["stage_group_records", "even_layers", "group_gpus_per_replica"]


def even_layers(layers: int, stages: int) -> tuple[int, ...]:
    """``layers`` over ``stages`` as evenly as they go, the extra layers on the first stages."""
    q, r = divmod(layers, stages)
    return tuple(q + (1 if s < r else 0) for s in range(stages))


def group_gpus_per_replica(group: StageGroupSpec, par: ParallelismSpec) -> int:
    """GPUs one pipeline replica takes in ``group``: ``tp x cp`` per stage."""
    tp = par.tp if group.tp is None else group.tp
    return tp * par.cp * group.stages


def stage_group_records(
    data: Mapping[str, Any],
    model: ModelSpec,
    training: TrainingSpec,
    par: ParallelismSpec,
    islands: Sequence[IslandSpec],
    file: str | None,
) -> tuple[StageGroupSpec, ...]:
    """The ``[[stage_group]]`` entries of ``data``, checked (see the module docstring); ``()``
    when there are none."""
    raw = data.get("stage_group")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise ScenarioError(
            "expected an array of tables [[stage_group]] (at least one)", path="stage_group", file=file
        )
    if data.get("offer") is not None:
        raise ScenarioError(
            "a pipeline of stage groups runs on fixed [[island]]s, not on offers", path="offer", file=file
        )
    names = [str(i.name) for i in islands]
    groups = tuple(_group(g, k, names, file) for k, g in enumerate(raw))
    _check_names(groups, file)
    _check_layers(groups, model, file)
    _check_micro_batch(groups, training, file)
    _check_parallelism(groups, par, data, file)
    return groups


def _group(table: Any, k: int, islands: list[str], file: str | None) -> StageGroupSpec:
    where = f"stage_group[{k}]"
    if not isinstance(table, dict):
        raise ScenarioError("expected a table", path=where, file=file)
    t = dict(table)
    for key in ("island", "stages", "layers"):
        if key not in t:
            raise ScenarioError("required key is missing", path=f"{where}.{key}", file=file)
    layers = t.pop("layers")
    t.setdefault("name", f"group-{k}")
    rec = structure_record({**t, "layers": ()}, StageGroupSpec, path=where, file=file)
    if rec.island not in islands:
        raise ScenarioError(
            f"expected the name of an [[island]] ({', '.join(repr(n) for n in islands)}), got {rec.island!r}",
            path=f"{where}.island",
            file=file,
        )
    return attrs.evolve(rec, layers=_stage_layers(layers, rec.stages, f"{where}.layers", file))


def _stage_layers(value: Any, stages: int, where: str, file: str | None) -> tuple[int, ...]:
    """``layers``: one integer (split evenly over the stages) or one per stage, each >= 1."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < stages:
            raise ScenarioError(
                f"expected at least one layer per stage ({stages} stages), got {value}", path=where, file=file
            )
        return even_layers(value, stages)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ScenarioError(
            f"expected an integer or a list of {stages} integers (one per stage)", path=where, file=file
        )
    if len(value) != stages:
        raise ScenarioError(
            f"expected {stages} counts (one per stage), got {len(value)}", path=where, file=file
        )
    if min(value) < 1:
        raise ScenarioError(f"expected every stage to hold >= 1 layer, got {value}", path=where, file=file)
    return tuple(value)


def _check_names(groups: Sequence[StageGroupSpec], file: str | None) -> None:
    seen: set[str] = set()
    for k, g in enumerate(groups):
        if g.name in seen:
            raise ScenarioError(
                f"stage group name {g.name!r} is used twice", path=f"stage_group[{k}].name", file=file
            )
        seen.add(g.name)


def _check_layers(groups: Sequence[StageGroupSpec], model: ModelSpec, file: str | None) -> None:
    total = sum(sum(g.layers) for g in groups)
    if total != model.layers:
        raise ScenarioError(
            f"the stage groups' layers sum to {total}; model.layers is {model.layers}",
            path=f"stage_group[{len(groups) - 1}].layers",
            file=file,
        )


def _check_micro_batch(groups: Sequence[StageGroupSpec], training: TrainingSpec, file: str | None) -> None:
    first = groups[0].micro_batch or training.micro_batch
    for k, g in enumerate(groups):
        mb = g.micro_batch or training.micro_batch
        if mb != first:
            raise ScenarioError(
                f"1F1B hands one micro-batch from stage to stage: every stage group takes the same "
                f"micro_batch (stage_group[0] takes {first}), got {mb}",
                path=f"stage_group[{k}].micro_batch",
                file=file,
            )


def _check_parallelism(
    groups: Sequence[StageGroupSpec], par: ParallelismSpec, data: Mapping[str, Any], file: str | None
) -> None:
    stages = sum(g.stages for g in groups)
    if par.pp not in (1, stages):
        raise ScenarioError(
            f"the stage groups have {stages} stages in all; leave pp out or give {stages}, got {par.pp}",
            path="parallelism.pp",
            file=file,
        )
    if par.schedule != "1f1b" or par.virtual_stages != 1:
        key = "schedule" if par.schedule != "1f1b" else "virtual_stages"
        raise ScenarioError(
            "a pipeline of stage groups runs 1F1B with one model chunk per stage",
            path=f"parallelism.{key}",
            file=file,
        )
    for key in ("first_stage_layers", "last_stage_layers", "embedding_in_split", "loss_in_split"):
        if getattr(par, key):
            raise ScenarioError(
                "the stage groups' layers give the split; leave it out", path=f"parallelism.{key}", file=file
            )
    for i, isl in enumerate(data.get("island") or ()):
        if isinstance(isl, dict):
            for key in ("parallelism", "micro_batch"):
                if key in isl:
                    raise ScenarioError(
                        "with [[stage_group]] each group gives its own layout; leave it out",
                        path=f"island[{i}].{key}",
                        file=file,
                    )
    sync = data.get("sync")
    extra = (
        [k for k, v in sync.items() if (k, v) != ("strategy", "allreduce")] if isinstance(sync, dict) else []
    )
    if extra:
        key = extra[0]
        raise ScenarioError(
            "the islands run one pipeline, not replicas to synchronise: [sync] does not apply",
            path=f"sync.{key}",
            file=file,
        )

"""Scenario files: TOML -> frozen attrs records, strictly (see SCENARIO.md).

Loading goes: read TOML -> apply ``--set`` overrides on the raw tables ->
merge a model preset -> split strategy options out of ``[parallelism]`` and
``[sync]`` (checked against the registered strategies) -> structure with the
strict cattrs converter -> range checks. Every problem is a
:class:`ScenarioError` naming the file and the key path.

The records live in :mod:`.specs`, the overrides in :mod:`.overrides`, file
reading and presets in :mod:`.files`, the strategy options in :mod:`.options`
and a framework profile's defaults in :mod:`.framework_defaults`; this module
builds the records from the raw tables.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import math
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from shardmeter.errors import ScenarioError
from shardmeter.load.files import MAX_DEPTH, check_depth, model_presets, read_scenario_file
from shardmeter.load.framework_defaults import apply_framework
from shardmeter.load.framework_defaults import (
    framework_failed as framework_failed,  # re-exported: shardmeter.inputs.build imports it from here
)
from shardmeter.load.offers import OFFERS_NOTE, offer_island
from shardmeter.load.options import check_option_record, check_option_values, split_options
from shardmeter.load.overrides import apply_override, parse_override
from shardmeter.load.specs import (
    IslandSpec,
    ModelSpec,
    NetworkSpec,
    OfferSpec,
    ParallelismSpec,
    ReliabilitySpec,
    Scenario,
    SyncSpec,
    TrainingSpec,
    VariabilitySpec,
)
from shardmeter.load.specs import (
    TierSpec as TierSpec,  # re-exported: shardmeter.resolve.resolver imports it from here
)
from shardmeter.load.stage_groups import stage_group_records
from shardmeter.parts import option_defaults
from shardmeter.registry.convert import FLOAT_MAX, key_path, structure_record
from shardmeter.registry.guard import provider, who

__all__ = [
    "Scenario",
    "ModelSpec",
    "TrainingSpec",
    "IslandSpec",
    "NetworkSpec",
    "OfferSpec",
    "ParallelismSpec",
    "SyncSpec",
    "load_scenario",
    "scenario_tables",
    "without_default_sync",
    "apply_override",
    "parse_override",
    "model_presets",
]

_PAR_FIELDS = {f.name for f in attrs.fields(ParallelismSpec)} - {"options"}
_SYNC_FIELDS = {f.name for f in attrs.fields(SyncSpec)} - {"options"}
_TOP = {
    "model",
    "training",
    "island",
    "offer",
    "network",
    "parallelism",
    "sync",
    "reliability",
    "variability",
    "measured",
    "source",
    "catalog",
    "stage_group",
}


def load_scenario(
    source: str | os.PathLike | Mapping[str, Any] | Scenario,
    *,
    overrides=(),
    registry=None,
    file: str | None = None,
) -> Scenario:
    """Load a scenario from a TOML file path, a dict of raw tables, or an already-loaded
    :class:`Scenario` (its tables, :func:`scenario_tables`, loaded again with ``overrides``).

    :param overrides: ``(key, value)`` pairs or ``"KEY=VALUE"`` strings, applied
        in order before validation (the ``--set`` of the CLI).
    :param registry: the :class:`~shardmeter.Registry` whose strategies' options
        are accepted (default: the installed plugins).
    :param file: the file a dict's tables came from, named in errors and kept as the
        scenario's ``file`` (a loaded scenario's own ``file`` by default).
    :raises ScenarioError: one line naming the file and key path.
    """
    if isinstance(overrides, str):  # one "KEY=VALUE", not its characters
        overrides = (overrides,)
    if isinstance(source, Scenario):
        file = file or source.file
        source = scenario_tables(source)
    if isinstance(source, Mapping):
        check_depth(source, file)
        data = copy.deepcopy(dict(source))
    else:
        data, file = read_scenario_file(source)
    try:
        check_depth(data, file)
        for ov in overrides:
            key, value = parse_override(ov) if isinstance(ov, str) else ov
            data = apply_override(data, key, value)
            check_depth(data, file)
        return _build(data, file, registry)
    except ScenarioError as exc:
        if file and not exc.file:
            raise exc.with_file(file) from exc
        raise
    except RecursionError:  # an absurdly nested --set value
        raise ScenarioError(f"nested more than {MAX_DEPTH} levels deep", file=file) from None


def scenario_tables(sc: Scenario) -> dict[str, Any]:
    """The raw tables of a loaded scenario, which load back to the same scenario: its
    :meth:`~Scenario.to_dict`, less the ``[model]`` keys its preset (and the defaults) would
    give anyway, so that an override of ``model.preset`` takes effect as it does on the file."""
    data = sc.to_dict()
    for key in sc.framework_keys:  # the profile sets them again, with its notes
        table, _, field = key.partition(".")
        if isinstance(data.get(table), dict):
            data[table].pop(field, None)
    data = without_default_sync(data, sc)
    model = data.get("model")
    name = model.get("preset") if isinstance(model, dict) else None
    presets = model_presets() if isinstance(name, str) else {}
    if isinstance(model, dict) and name in presets:
        implied = {f.name: f.default for f in attrs.fields(ModelSpec) if f.default is not attrs.NOTHING}
        implied.update(presets[name])
        data["model"] = {k: v for k, v in model.items() if k == "preset" or implied.get(k, _NONE) != v}
    return data


def without_default_sync(data: dict[str, Any], sc: Scenario) -> dict[str, Any]:
    """``data`` (``sc.to_dict()``) without its ``[sync]`` where that is the default, which
    ``to_dict`` always writes, and the file gave none: loaded again, a one-island scenario
    would otherwise note a ``[sync]`` its file never had."""
    if data.get("sync") == {"strategy": "allreduce"} and _SINGLE_ISLAND_NOTE not in sc.notes:
        data = {k: v for k, v in data.items() if k != "sync"}
    return data


_NONE = object()
_SINGLE_ISLAND_NOTE = "[sync] and [network] apply only with two islands or more: ignored"
_SINGLE_UPLINK_NOTE = "an island's uplink applies only with two islands or more: ignored"


def _build(data: dict[str, Any], file: str | None, registry) -> Scenario:
    """The records of raw tables ``data``, table by table in a fixed order (so the first
    problem reported is always the same one)."""
    from shardmeter.registry.manager import get_registry

    reg = registry if registry is not None else get_registry()
    _check_tables(data, file)
    _check_magnitudes(data, file)
    notes: list[str] = []
    model_rec = _model_record(data.get("model"), file, notes)
    training = _required_table(data.get("training"), "training", file)
    framework_keys = apply_framework(data, model_rec, reg, file, notes)
    with _blaming_profile(data, framework_keys, _profile_named(reg, data["training"].get("framework"))):
        training_rec = structure_record(training, TrainingSpec, path="training", file=file)
        parse_par = _parallelism_parser(reg, file, notes)
        par_rec = parse_par(data.get("parallelism", {}), "parallelism")
        offer_recs = _offer_records(data.get("offer"), file)
        isl_recs = _island_records(data, parse_par, file, required=not offer_recs)
    isl_recs += [offer_island(o) for o in offer_recs]
    _check_unique_names(isl_recs, file)
    network = data.get("network")
    net_rec = _network_record(network, file)
    sync_rec = _sync_record(data.get("sync", {}), reg, file, notes)
    groups = stage_group_records(data, model_rec, training_rec, par_rec, isl_recs, file)
    if len(isl_recs) < 2 and (data.get("sync") or network is not None):
        notes.append(_SINGLE_ISLAND_NOTE)
    if len(isl_recs) < 2 and isl_recs[0].uplink is not None:
        notes.append(_SINGLE_UPLINK_NOTE)
    if offer_recs:
        notes.append(OFFERS_NOTE)
    reliability = _model_table(
        data.get("reliability"), ReliabilitySpec, "failures", reg, "reliability", file, notes
    )
    variability = _model_table(
        data.get("variability"), VariabilitySpec, "variability", reg, "variability", file, notes
    )
    measured = _measured(data.get("measured", {}), file)
    source = data.get("source", {})
    if not isinstance(source, dict):
        raise ScenarioError("expected a table", path="source", file=file)
    return Scenario(
        model=model_rec,
        training=training_rec,
        islands=tuple(isl_recs),
        offers=offer_recs,
        parallelism=par_rec,
        network=net_rec,
        sync=sync_rec,
        reliability=reliability,
        variability=variability,
        measured=measured,
        source=dict(source),
        catalog=_catalog(data.get("catalog"), file),
        notes=tuple(notes),
        framework_keys=framework_keys,
        file=file,
        stage_groups=groups,
    )


@contextlib.contextmanager
def _blaming_profile(data: Mapping[str, Any], set_keys: tuple[str, ...], name: Any) -> Iterator[None]:
    """A table that does not load because of a value the framework profile filled names the
    profile and that value (a written key that conflicts with a profile's default is not the
    user's mistake alone): the keys it set in the failing table whose name the message quotes,
    else all it set there."""
    try:
        yield
    except ScenarioError as exc:
        table = "training" if exc.path.startswith("training") else "parallelism"
        mine = [k for k in set_keys if k.startswith(table + ".")]
        if not mine:
            raise
        quoted = (
            [k for k in mine if exc.path == k or exc.path.startswith((k + ".", k + "["))]
            or [k for k in mine if k.partition(".")[2] in exc.message]
            or mine
        )
        filled = ", ".join(f"{k} = {_shown_value(data, k)}" for k in quoted)
        raise ScenarioError(
            f"{exc.message} ({filled}: a default of {name}; write "
            f"{' and '.join(quoted)} in the scenario to choose another)",
            path=exc.path,
            file=exc.file,
        ) from None


def _profile_named(reg: Any, name: Any) -> str:
    """``framework torchtitan``, and the plugin and distribution that provide it where that is
    not ShardMeter itself (a plugin's profile whose default does not load is the plugin's)."""
    try:
        part = reg.get("framework", name)
    except Exception:  # noqa: BLE001 - an unknown profile was refused before; name it as written
        return f"framework {name}"
    found = provider(part)
    ours = found is None or found[1].split(" ")[0] == "shardmeter"
    return f"framework {name}" if ours else who("framework", part)


def _shown_value(data: Mapping[str, Any], key: str, limit: int = 60) -> str:
    """A profile-filled value for a one-line message (shortened past ``limit``)."""
    table, _, field = key.partition(".")
    value = data.get(table, {}).get(field)
    text = f'"{value}"' if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_tables(data: Mapping[str, Any], file: str | None) -> None:
    """Every top-level table must be one a scenario has."""
    for k in data:
        if k not in _TOP:
            import difflib

            close = difflib.get_close_matches(str(k), sorted(_TOP | {"islands"}), n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ScenarioError(f"unknown table{hint}", path=key_path(k), file=file)


def _catalog(value: Any, file: str | None) -> tuple[str, ...] | None:
    """``catalog``: one overlay path or a list of them (docs/calibration.md), or None."""
    if value is None:
        return None
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
        raise ScenarioError("expected a catalog overlay path or a list of paths", path="catalog", file=file)
    return tuple(paths)


def _check_magnitudes(data: Mapping[str, Any], file: str | None) -> None:
    """No integer in the tables (``[source]`` aside, which is never read) may exceed
    :data:`~shardmeter.registry.convert.FLOAT_MAX` in magnitude: every count and figure has a smaller
    limit, and a several-hundred-digit integer would otherwise overflow a float (a traceback)
    or print all its digits in the error."""
    stack: list[tuple[Any, str]] = [(v, key_path(k)) for k, v in data.items() if k != "source"][::-1]
    while stack:  # depth first, in the file's order (the first problem reported is the first one)
        obj, path = stack.pop()
        if isinstance(obj, Mapping):
            stack.extend([(v, f"{path}.{key_path(k)}") for k, v in obj.items()][::-1])
        elif isinstance(obj, (list, tuple)):
            stack.extend([(v, f"{path}[{i}]") for i, v in enumerate(obj)][::-1])
        elif isinstance(obj, int) and not isinstance(obj, bool) and abs(obj) > FLOAT_MAX:
            raise ScenarioError(_too_large(obj), path=path, file=file)


def _too_large(v: int | float) -> str:
    """The message of a number above :data:`~shardmeter.registry.convert.FLOAT_MAX`, never all its digits."""
    if isinstance(v, int) and len(str(abs(v))) > 24:
        return f"a {len(str(abs(v)))}-digit integer is absurdly large (limit {FLOAT_MAX:g})"
    return f"{v!r} is absurdly large (limit {FLOAT_MAX:g})"


def _required_table(table: Any, name: str, file: str | None) -> dict[str, Any]:
    """``[name]``, which a scenario must have, as a table."""
    if not isinstance(table, dict):
        raise ScenarioError(
            f"required table [{name}] is missing" if table is None else "expected a table",
            path=name,
            file=file,
        )
    return table


def _model_record(table: Any, file: str | None, notes: list[str] | None = None) -> ModelSpec:
    """``[model]``, its ``preset`` or ``hf_config`` (if any) filling the keys it does not give;
    the config's notes (what it approximated) go to ``notes``."""
    model = dict(_required_table(table, "model", file))
    if "hf_config" in model:
        if "preset" in model:
            raise ScenarioError(
                "give either model.preset or model.hf_config, not both", path="model.hf_config", file=file
            )
        base, hf_notes = _hf_model(model["hf_config"], file)
        model = {**base, **model}
        if notes is not None:
            notes.extend(hf_notes)
    if "preset" in model:
        presets = model_presets()
        name = model["preset"]
        if not isinstance(name, str) or name not in presets:
            import difflib

            close = difflib.get_close_matches(str(name), list(presets), n=3, cutoff=0.5)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise ScenarioError(f"unknown model preset {name!r}{hint}", path="model.preset", file=file)
        base = {k: v for k, v in presets[name].items() if k != "source"}
        model = {**base, **model}
    return structure_record(model, ModelSpec, path="model", file=file)


def _hf_model(path: Any, file: str | None) -> tuple[dict[str, Any], list[str]]:
    """The ``[model]`` keys of the ``config.json`` at ``path``: relative to the scenario file's
    folder, or to the current directory when the scenario has no file (stdin, a dict)."""
    from shardmeter.load.hf_config import model_table_from_hf, read_hf_config

    if not isinstance(path, str) or not path:
        raise ScenarioError(
            f"expected the path of a config.json, got {path!r}", path="model.hf_config", file=file
        )
    full = path if os.path.isabs(path) or not file else os.path.join(os.path.dirname(file), path)
    try:
        return model_table_from_hf(read_hf_config(full))
    except ScenarioError as exc:
        raise exc.with_file(file) if file else exc from None


def _parallelism_parser(reg, file: str | None, notes: list[str]) -> Callable[[Any, str], ParallelismSpec]:
    """A parser of ``[parallelism]`` tables (the top-level one, or an island's merged over it):
    fixed keys to a :class:`ParallelismSpec`, the registered sharding and schedule
    strategies' keys to its checked ``options``."""
    known = {n: set(option_defaults(reg.get("sharding", n).options)) for n in reg.names("sharding")}
    for n in reg.names("schedule"):
        known[n] = set(option_defaults(reg.get("schedule", n).options))

    def parse(table: Any, where: str) -> ParallelismSpec:
        if not isinstance(table, dict):
            raise ScenarioError("expected a table", path=where, file=file)
        chosen = tuple(
            c for c in (table.get("sharding", "none"), table.get("schedule", "1f1b")) if isinstance(c, str)
        )
        base, opts = split_options(table, _PAR_FIELDS, known, chosen, where, file, notes)
        base = _default_virtual_stages(base, reg, where, notes)
        rec = structure_record(base, ParallelismSpec, path=where, file=file)
        for kind, name in (("sharding", rec.sharding), ("schedule", rec.schedule)):
            if name in reg.names(kind):
                options = reg.get(kind, name).options
                check_option_values(option_defaults(options), opts, where, file)
                check_option_record(options, opts, where, file)
        return attrs.evolve(rec, options=opts)

    return parse


#: Model chunks per stage of a schedule that uses them when neither the scenario nor its
#: software-stack profile gives a count (docs/scenario.md).
DEFAULT_VIRTUAL_STAGES = 2


def _default_virtual_stages(base: dict[str, Any], reg, where: str, notes: list[str]) -> dict[str, Any]:
    """``virtual_stages`` unset under a schedule that uses model chunks (``interleaved``): the
    stack's default when its profile filled one, else :data:`DEFAULT_VIRTUAL_STAGES`, with a
    note, in place of one chunk (which would run plain 1F1B)."""
    name = base.get("schedule")
    pp = base.get("pp", 1)
    if "virtual_stages" in base or not isinstance(name, str) or name not in reg.names("schedule"):
        return base
    if not isinstance(pp, int) or pp < 2:
        return base
    part = reg.get("schedule", name)
    if not part.uses_virtual_stages(part.options()):
        return base
    note = (
        f"{where}.virtual_stages = {DEFAULT_VIRTUAL_STAGES}: the '{name}' schedule without "
        "virtual_stages (no stack default given) runs two model chunks per stage"
    )
    if note not in notes:
        notes.append(note)
    return {**base, "virtual_stages": DEFAULT_VIRTUAL_STAGES}


def _island_records(
    data: Mapping[str, Any], parse_par, file: str | None, required: bool = True
) -> list[IslandSpec]:
    """``[[island]]`` (or ``[[islands]]``): at least one (unless the scenario has ``[[offer]]``),
    each named."""
    islands = data.get("island", data.get("islands"))
    if islands is None and not required:
        return []
    if islands is None:
        raise ScenarioError("at least one [[island]] (or [[offer]]) is required", path="island", file=file)
    if not isinstance(islands, list) or not islands:
        raise ScenarioError("expected an array of tables [[island]] (at least one)", path="island", file=file)
    isl_recs = []
    for i, isl in enumerate(islands):
        rec = _island_record(isl, f"island[{i}]", data.get("parallelism", {}), parse_par, file)
        if rec.name is None:
            rec = attrs.evolve(rec, name=f"island-{i}" if len(islands) > 1 else "cluster")
        isl_recs.append(rec)
    return isl_recs


def _check_unique_names(isl_recs: list[IslandSpec], file: str | None) -> None:
    """No name used twice by islands and offers together (an offer becomes an island)."""
    names = [str(r.name) for r in isl_recs]  # every island is named by now
    dup = {n for n, k in collections.Counter(names).items() if k > 1}  # linear: thousands of islands
    if dup:
        raise ScenarioError(f"island name {sorted(dup)[0]!r} is used twice", path="island", file=file)


def _offer_records(offers: Any, file: str | None) -> tuple[OfferSpec, ...]:
    """``[[offer]]``: candidate islands (:mod:`shardmeter.load.offers`), each named."""
    if offers is None:
        return ()
    if not isinstance(offers, list) or not offers:
        raise ScenarioError("expected an array of tables [[offer]] (at least one)", path="offer", file=file)
    return tuple(structure_record(o, OfferSpec, path=f"offer[{k}]", file=file) for k, o in enumerate(offers))


def _island_record(isl: Any, where: str, top_par: Any, parse_par, file: str | None) -> IslandSpec:
    """One island's table; its own ``[parallelism]`` is merged over the top-level one."""
    if not isinstance(isl, dict):
        raise ScenarioError("expected a table", path=where, file=file)
    isl = dict(isl)
    ipar = isl.pop("parallelism", None)
    rec = structure_record(isl, IslandSpec, path=where, file=file)
    if rec.gpu is None:
        raise ScenarioError("required key is missing", path=f"{where}.gpu", file=file)
    _check_tiers(rec, where, file)
    if ipar is not None:
        merged = {**top_par, **ipar} if isinstance(ipar, dict) else ipar
        rec = attrs.evolve(rec, parallelism=parse_par(merged, f"{where}.parallelism"))
    return rec


def _check_tiers(rec: IslandSpec, where: str, file: str | None) -> None:
    """``tiers`` replaces ``intra_node``/``inter_node``; domains grow outwards; only the last may
    omit ``gpus`` (it joins the whole island)."""
    if rec.tiers is None:
        return
    if not rec.tiers:
        raise ScenarioError("expected at least one tier", path=f"{where}.tiers", file=file)
    for key in ("intra_node", "inter_node"):
        if getattr(rec, key) is not None:
            raise ScenarioError(f"give either tiers or {key}, not both", path=f"{where}.{key}", file=file)
    last = 0
    for t, tier in enumerate(rec.tiers):
        if tier.gpus is None:
            if t != len(rec.tiers) - 1:
                raise ScenarioError(
                    "required on every tier but the last (which joins the whole island)",
                    path=f"{where}.tiers[{t}].gpus",
                    file=file,
                )
            continue
        if tier.gpus <= last:
            raise ScenarioError(
                f"expected more GPUs than the tier inside it ({last}), got {tier.gpus}",
                path=f"{where}.tiers[{t}].gpus",
                file=file,
            )
        last = tier.gpus


def _network_record(network: Any, file: str | None) -> NetworkSpec | None:
    """``[network]``, if given; a link table without a ``name`` overrides the default link."""
    if network is None:
        return None
    if isinstance(network, dict) and isinstance(network.get("link"), dict) and "name" not in network["link"]:
        # `--set network.link.bandwidth_gb_s=0.5` without a [network] table: override the default link
        network = {**network, "link": {"name": "internet", **network["link"]}}
    return structure_record(network, NetworkSpec, path="network", file=file)


def _sync_record(sync: Any, reg, file: str | None, notes: list[str]) -> SyncSpec:
    """``[sync]``: the strategy, and the registered sync strategies' keys as checked ``options``."""
    sync_known = {n: set(option_defaults(reg.get("sync", n).options)) for n in reg.names("sync")}
    if not isinstance(sync, dict):
        raise ScenarioError("expected a table", path="sync", file=file)
    chosen = sync.get("strategy", "allreduce")
    base, opts = split_options(
        sync, _SYNC_FIELDS, sync_known, chosen if isinstance(chosen, str) else "", "sync", file, notes
    )
    sync_rec = attrs.evolve(structure_record(base, SyncSpec, path="sync", file=file), options=opts)
    if sync_rec.strategy in reg.names("sync"):
        options = reg.get("sync", sync_rec.strategy).options
        check_option_values(option_defaults(options), opts, "sync", file)
        check_option_record(options, opts, "sync", file)
    return sync_rec


def _model_table(
    table: Any, spec: type, kind: str, reg, where: str, file: str | None, notes: list[str]
) -> Any:
    """``[reliability]`` or ``[variability]`` (None when absent): the table's own keys, and the
    keys of the registered ``kind`` models (the chosen ``model``'s checked by its options class,
    another's kept and noted as ignored, as ``[sync]`` does)."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ScenarioError("expected a table", path=where, file=file)
    fields = {f.name for f in attrs.fields(spec)} - {"options"}
    known = {n: set(option_defaults(reg.get(kind, n).options)) for n in reg.names(kind)}
    chosen = table.get("model", attrs.fields_dict(spec)["model"].default)
    base, opts = split_options(
        table, fields, known, chosen if isinstance(chosen, str) else "", where, file, notes
    )
    rec = attrs.evolve(structure_record(base, spec, path=where, file=file), options=opts)
    if rec.model in reg.names(kind):
        options = reg.get(kind, rec.model).options
        check_option_values(option_defaults(options), opts, where, file)
        check_option_record(options, opts, where, file)
    return rec


def _measured(measured: Any, file: str | None) -> dict[str, float]:
    """``[measured]``: report numbers of a real run, each finite, > 0 and at most
    :data:`~shardmeter.registry.convert.FLOAT_MAX`."""
    if not isinstance(measured, dict):
        raise ScenarioError("expected a table", path="measured", file=file)
    out = {}
    for k, v in measured.items():
        path = f"measured.{key_path(k)}"
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ScenarioError("expected a finite number", path=path, file=file)
        if isinstance(v, int) and abs(v) > FLOAT_MAX:  # float() of a 400-digit integer overflows
            raise ScenarioError(_too_large(v), path=path, file=file)
        x = float(v)
        if not math.isfinite(x):
            raise ScenarioError("expected a finite number", path=path, file=file)
        if x <= 0:  # every report number is >= 0, and a relative error needs a measurement > 0
            raise ScenarioError(f"expected a number > 0, got {v!r}", path=path, file=file)
        if x > FLOAT_MAX:
            raise ScenarioError(_too_large(v), path=path, file=file)
        out[k] = x
    return out

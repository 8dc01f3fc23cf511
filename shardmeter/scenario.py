"""Scenario files: TOML -> frozen attrs records, strictly (see SCENARIO.md).

Loading goes: read TOML -> apply ``--set`` overrides on the raw tables ->
merge a model preset -> split strategy options out of ``[parallelism]`` and
``[sync]`` (checked against the registered strategies) -> structure with the
strict cattrs converter -> range checks. Every problem is a
:class:`ScenarioError` naming the file and the key path.
"""

from __future__ import annotations

import copy
import math
import os
import re
import sys
from importlib import resources
from typing import Any, Mapping

import attrs

from .convert import key_path, structure_record
from .errors import ScenarioError
from .parts import option_defaults
from .records import PRECISIONS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "Scenario",
    "ModelSpec",
    "TrainingSpec",
    "IslandSpec",
    "NetworkSpec",
    "ParallelismSpec",
    "SyncSpec",
    "load_scenario",
    "apply_override",
    "parse_override",
    "model_presets",
]


def _count(inst, attribute, value):
    if value is None:
        return
    if value < 1:
        raise ValueError(f"{attribute.name}: expected an integer >= 1, got {value!r}")


def _count_or_none(inst, attribute, value):
    _count(inst, attribute, value)


def _pos(inst, attribute, value):
    if value is None:
        return
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{attribute.name}: expected a finite number > 0, got {value!r}")


def _one_of(*options):
    def check(inst, attribute, value):
        if value not in options:
            import difflib

            close = difflib.get_close_matches(str(value), options, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"{attribute.name}: expected one of {', '.join(repr(o) for o in options)}, got {value!r}{hint}"
            )

    return check


_MAX = 2**40  # absurdly large counts are errors, not overflows


def _bounded(inst, attribute, value):
    if value is not None and value > _MAX:
        raise ValueError(f"{attribute.name}: {value!r} is absurdly large (limit {_MAX})")


@attrs.frozen(kw_only=True)
class ModelSpec:
    """``[model]``: the transformer. Defaults: ``kv_heads = heads``,
    ``head_dim = hidden / heads``, ``ffn_hidden = 4 * hidden``, ``ffn = "gelu"``,
    untied embeddings, dense (``experts = 1``; ``capacity_factor = 1.0`` pads each
    expert's token buffer for MoE), causal attention, no dropout
    (``dropout = true`` stores Megatron-style dropout masks, as in Korthikanti
    et al. 2022's activation formulas)."""

    preset: str | None = None
    layers: int = attrs.field(validator=[_count, _bounded])
    hidden: int = attrs.field(validator=[_count, _bounded])
    heads: int = attrs.field(validator=[_count, _bounded])
    vocab: int = attrs.field(validator=[_count, _bounded])
    seq_len: int = attrs.field(validator=[_count, _bounded])
    kv_heads: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    head_dim: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    ffn_hidden: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    ffn: str = attrs.field(default="gelu", validator=_one_of("gelu", "swiglu"))
    tied_embeddings: bool = False
    experts: int = attrs.field(default=1, validator=[_count, _bounded])
    experts_per_token: int = attrs.field(default=1, validator=[_count, _bounded])
    capacity_factor: float = attrs.field(default=1.0, validator=_pos)
    causal: bool = True
    dropout: bool = False

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or max(1, self.hidden // self.heads)

    @property
    def d_ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden


@attrs.frozen(kw_only=True)
class TrainingSpec:
    """``[training]``. Defaults: ``micro_batch = 1``, ``precision = "bf16"``,
    ``recompute = "none"``, ``optimizer = "adam"``, ``attention = "flash"``
    (the GPU's current fused-attention kernel, which skips masked blocks:
    FlashAttention-2 on Ampere, FlashAttention-3 / cuDNN on Hopper and later;
    ``"flash2"`` the FlashAttention-2 kernels on any GPU, as stacks of 2023-2024 ran
    them on H100; ``"materialized"`` stores and computes the full score matrix, as
    Megatron-LM did before FlashAttention)."""

    global_batch: int = attrs.field(validator=[_count, _bounded])
    micro_batch: int = attrs.field(default=1, validator=[_count, _bounded])
    precision: str = attrs.field(default="bf16", validator=_one_of(*PRECISIONS))
    recompute: str = attrs.field(default="none", validator=_one_of("none", "selective", "full"))
    optimizer: str = attrs.field(default="adam", validator=_one_of("adam", "adamw", "sgd"))
    attention: str = attrs.field(default="flash", validator=_one_of("flash", "flash2", "materialized"))
    tokens: float | None = attrs.field(default=None, validator=_pos)


@attrs.frozen(kw_only=True)
class ParallelismSpec:
    """``[parallelism]`` inside one island. ``dp`` defaults to what fills the island.

    ``tp_comm_overlap`` (default false) hides tensor-parallel communication
    under GEMMs (Transformer Engine userbuffers); ``dp_comm_overlap`` (default
    true) overlaps bucketed gradient reduction with the backward pass.
    ``options`` holds keys read by registered sharding/schedule strategies.
    """

    tp: int = attrs.field(default=1, validator=[_count, _bounded])
    pp: int = attrs.field(default=1, validator=[_count, _bounded])
    dp: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    cp: int = attrs.field(default=1, validator=[_count, _bounded])
    ep: int = attrs.field(default=1, validator=[_count, _bounded])
    sequence_parallel: bool = False
    sharding: str = "none"
    schedule: str = "1f1b"
    virtual_stages: int = attrs.field(default=1, validator=[_count, _bounded])
    tp_comm_overlap: bool = False
    dp_comm_overlap: bool = True
    options: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class SyncSpec:
    """``[sync]``: how islands synchronise; ``options`` holds the chosen (or any
    registered) sync strategy's keys such as ``inner_steps``."""

    strategy: str = "allreduce"
    options: dict[str, Any] = attrs.field(factory=dict)


def _at_least_one(inst, attribute, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise ValueError(f"expected a number >= 1, got {value!r}")


@attrs.frozen(kw_only=True)
class TierSpec:
    """One network tier of an island (``tiers = [...]``, innermost first): ``link`` (a registered
    interconnect or an inline table), ``gpus`` joined by one domain of it (omit on the last:
    the whole island) and ``oversubscription`` (>= 1; bandwidth across the tier divided by it)."""

    link: Any
    gpus: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    oversubscription: float = attrs.field(default=1.0, validator=_at_least_one)


@attrs.frozen(kw_only=True)
class IslandSpec:
    """``[[island]]``: one cluster. Parts (``gpu``, links, ``price``) are a
    registered name or an inline table ``{ name = "...", field = value }``."""

    name: str | None = None
    gpu: Any = None
    nodes: int = attrs.field(validator=[_count, _bounded])
    gpus_per_node: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    intra_node: Any = None
    inter_node: Any = None
    nics_per_node: int | None = attrs.field(default=None, validator=[_count_or_none, _bounded])
    price: Any = None
    tiers: tuple[TierSpec, ...] | None = None
    parallelism: ParallelismSpec | None = None


@attrs.frozen(kw_only=True)
class NetworkSpec:
    """``[network]``: the link between islands (each island's uplink)."""

    link: Any = "internet"


@attrs.frozen(kw_only=True)
class Scenario:
    """A whole scenario. ``notes`` collects accepted-but-unused keys."""

    model: ModelSpec
    training: TrainingSpec
    islands: tuple[IslandSpec, ...]
    parallelism: ParallelismSpec = attrs.field(factory=ParallelismSpec)
    network: NetworkSpec | None = None
    sync: SyncSpec = attrs.field(factory=SyncSpec)
    measured: dict[str, float] = attrs.field(factory=dict)
    source: dict[str, Any] = attrs.field(factory=dict)
    notes: tuple[str, ...] = ()
    file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The scenario as plain tables (inverse of loading, presets expanded)."""
        from .convert import CONVERTER

        d = CONVERTER.unstructure(self)
        d.pop("notes", None)
        d.pop("file", None)
        d["island"] = d.pop("islands")
        for isl in d["island"]:
            if isl.get("parallelism") is not None:
                isl["parallelism"].update(isl["parallelism"].pop("options", {}))
        d["parallelism"].update(d["parallelism"].pop("options", {}))
        d["sync"].update(d["sync"].pop("options", {}))
        return _drop_none(d)


def _drop_none(x):
    if isinstance(x, dict):
        return {k: _drop_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_drop_none(v) for v in x]
    return x


# ---------------------------------------------------------------------------
# presets


def model_presets() -> dict[str, dict[str, Any]]:
    """Bundled model presets (``shardmeter/presets/models.toml``)."""
    text = resources.files("shardmeter").joinpath("presets/models.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


# ---------------------------------------------------------------------------
# overrides (--set KEY=VALUE)

_TOKEN = re.compile(r"([A-Za-z_][\w-]*)((?:\[\d+\])*)")


def _split_path(path: str) -> list[str | int]:
    out: list[str | int] = []
    for part in path.split("."):
        m = _TOKEN.fullmatch(part)
        if not m:
            raise ScenarioError(f"bad key path '{path}' (expected e.g. island[0].nodes)", path=path)
        out.append(m.group(1))
        out.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> (key, value): VALUE read as a TOML value, else a bare string."""
    if "=" not in text:
        raise ScenarioError(f"--set expects KEY=VALUE, got '{text}'")
    key, raw = text.split("=", 1)
    key = key.strip()
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except ValueError:  # TOMLDecodeError, or an integer of more than 4300 digits
        value = raw
    return key, value


def apply_override(data: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """Set ``key`` (dotted path with list indices; ``island`` and ``islands``
    are the same table) to ``value`` in a copy of raw scenario ``data``."""
    data = copy.deepcopy(data)
    parts = _split_path(key)
    if parts and parts[0] == "islands":
        parts[0] = "island"
    cur: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(part, int):
            if not isinstance(cur, list) or part >= len(cur):
                raise ScenarioError(f"index {part} is out of range", path=key)
            if not isinstance(cur[part], dict):
                raise ScenarioError("not a table", path=key)
            cur = cur[part]
            continue
        if not isinstance(cur, dict):
            raise ScenarioError("not a table", path=key)
        if part not in cur or cur[part] is None:
            cur[part] = [] if isinstance(nxt, int) else {}
        elif isinstance(cur[part], str) and not isinstance(nxt, int):
            cur[part] = {"name": cur[part]}  # `island[0].gpu.memory_gb=96` on a named part
        cur = cur[part]
    last = parts[-1]
    if isinstance(last, int):
        if not isinstance(cur, list) or last >= len(cur):
            raise ScenarioError(f"index {last} is out of range", path=key)
        cur[last] = value
    else:
        if not isinstance(cur, dict):
            raise ScenarioError("not a table", path=key)
        cur[last] = value
    return data


# ---------------------------------------------------------------------------
# loading

_PAR_FIELDS = {f.name for f in attrs.fields(ParallelismSpec)} - {"options"}
_SYNC_FIELDS = {f.name for f in attrs.fields(SyncSpec)} - {"options"}
_TOP = {"model", "training", "island", "network", "parallelism", "sync", "measured", "source"}


def _read_file(path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    name = os.fspath(path)
    if not os.path.exists(name):
        raise ScenarioError("no such file", file=name)
    if os.path.isdir(name):
        raise ScenarioError("is a directory, not a scenario file", file=name)
    try:
        with open(name, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ScenarioError(f"cannot read: {exc.strerror or exc}", file=name) from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ScenarioError("UTF-16 text: save the file as UTF-8 (TOML must be UTF-8)", file=name)
    try:
        text = raw.decode("utf-8-sig")  # a UTF-8 byte-order mark (Windows editors) is dropped
    except UnicodeDecodeError:
        raise ScenarioError("not a UTF-8 text file (TOML must be UTF-8)", file=name) from None
    if "\x00" in text:
        raise ScenarioError("not a text file (contains NUL bytes)", file=name)
    try:
        return tomllib.loads(text), name
    except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise ScenarioError(f"not valid TOML: {exc}", file=name) from None
    except RecursionError:
        raise ScenarioError(f"nested more than {_MAX_DEPTH} levels deep", file=name) from None


#: Deepest nesting of tables and arrays a scenario may have (real ones use 4).
_MAX_DEPTH = 32


def _check_depth(data: Any, file: str | None) -> None:
    """Reject absurdly nested data up front (iteratively), naming the key path, instead of
    failing later with a RecursionError that names nothing."""
    stack = [(data, "", 0)]
    while stack:
        obj, path, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise ScenarioError(f"nested more than {_MAX_DEPTH} levels deep", path=path, file=file)
        if isinstance(obj, Mapping):
            stack.extend((v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in obj.items())
        elif isinstance(obj, (list, tuple)):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(obj))


def _check_option_values(defaults: Mapping[str, Any], given: Mapping[str, Any], where: str,
                         file: str | None) -> None:
    """A chosen strategy's options must have the type of their default (as the
    estimator checks ``[sync]`` options): a bool, an integer >= 1 (>= 0 when the
    default is below 1), a finite number >= 0, or a string."""
    for k, v in given.items():
        if k not in defaults:
            continue
        default = defaults[k]
        if isinstance(default, bool):
            ok, want = isinstance(v, bool), "true or false"
        elif isinstance(default, int):
            floor = 1 if default >= 1 else 0
            ok, want = isinstance(v, int) and not isinstance(v, bool) and v >= floor, f"an integer >= {floor}"
        elif isinstance(default, float):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
            want = "a finite number >= 0"
        else:
            ok, want = isinstance(v, type(default)), f"a {type(default).__name__}"
        if not ok:
            raise ScenarioError(f"expected {want}, got {v!r}", path=f"{where}.{k}", file=file)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > _MAX:  # an overflow, not a plan
            raise ScenarioError(f"{v!r} is absurdly large (limit {_MAX})", path=f"{where}.{k}", file=file)


def _split_options(table: dict[str, Any], fields: set[str], known: Mapping[str, set[str]],
                   chosen: str | tuple[str, ...], where: str, file: str | None,
                   notes: list[str]) -> tuple[dict, dict]:
    """Separate a table's fixed keys from strategy options; unknown keys are errors.

    ``chosen`` names the strategies the table selects; a key read only by other
    registered strategies is kept and noted as ignored."""
    chosen = (chosen,) if isinstance(chosen, str) else tuple(chosen)
    base, opts = {}, {}
    all_known = set().union(*known.values()) if known else set()
    for k, v in table.items():
        if k in fields:
            base[k] = v
        elif k in all_known:
            opts[k] = v
            owners = [n for n, o in known.items() if k in o]
            if not set(chosen) & set(owners):
                which = "' / '".join(chosen)
                notes.append(f"{where}.{k} is read by {', '.join(owners)}, not by the chosen '{which}': ignored")
        else:
            import difflib

            close = difflib.get_close_matches(str(k), sorted(fields | all_known), n=2, cutoff=0.6)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise ScenarioError(f"unknown key{hint}", path=f"{where}.{key_path(k)}", file=file)
    return base, opts


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
                raise ScenarioError("required on every tier but the last (which joins the whole island)",
                                    path=f"{where}.tiers[{t}].gpus", file=file)
            continue
        if tier.gpus <= last:
            raise ScenarioError(f"expected more GPUs than the tier inside it ({last}), got {tier.gpus}",
                                path=f"{where}.tiers[{t}].gpus", file=file)
        last = tier.gpus


def load_scenario(source: str | os.PathLike | Mapping[str, Any], *, overrides=(), registry=None) -> Scenario:
    """Load a scenario from a TOML file path or a dict of raw tables.

    :param overrides: ``(key, value)`` pairs or ``"KEY=VALUE"`` strings, applied
        in order before validation (the ``--set`` of the CLI).
    :param registry: the :class:`~shardmeter.Registry` whose strategies' options
        are accepted (default: the installed plugins).
    :raises ScenarioError: one line naming the file and key path.
    """
    if isinstance(source, Mapping):
        _check_depth(source, None)
        data, file = copy.deepcopy(dict(source)), None
    else:
        data, file = _read_file(source)
    try:
        _check_depth(data, file)
        for ov in overrides:
            key, value = parse_override(ov) if isinstance(ov, str) else ov
            data = apply_override(data, key, value)
            _check_depth(data, file)
        return _build(data, file, registry)
    except ScenarioError as exc:
        raise exc.with_file(file) if file and not exc.file else exc
    except RecursionError:  # an absurdly nested --set value
        raise ScenarioError(f"nested more than {_MAX_DEPTH} levels deep", file=file) from None


def _build(data: dict[str, Any], file: str | None, registry) -> Scenario:
    from .plugins_core import get_registry

    reg = registry if registry is not None else get_registry()
    for k in data:
        if k not in _TOP:
            import difflib

            close = difflib.get_close_matches(str(k), sorted(_TOP | {"islands"}), n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ScenarioError(f"unknown table{hint}", path=key_path(k), file=file)
    notes: list[str] = []

    model = data.get("model")
    if not isinstance(model, dict):
        raise ScenarioError("required table [model] is missing" if model is None else "expected a table",
                            path="model", file=file)
    model = dict(model)
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
    model_rec = structure_record(model, ModelSpec, path="model", file=file)

    training = data.get("training")
    if not isinstance(training, dict):
        raise ScenarioError("required table [training] is missing" if training is None else "expected a table",
                            path="training", file=file)
    training_rec = structure_record(training, TrainingSpec, path="training", file=file)

    par_known = {n: set(option_defaults(reg.get("sharding", n).options)) for n in reg.names("sharding")}
    for n in reg.names("schedule"):
        par_known[n] = set(option_defaults(reg.get("schedule", n).options))

    def parse_par(table, where):
        if not isinstance(table, dict):
            raise ScenarioError("expected a table", path=where, file=file)
        chosen = tuple(c for c in (table.get("sharding", "none"), table.get("schedule", "1f1b"))
                       if isinstance(c, str))
        base, opts = _split_options(table, _PAR_FIELDS, par_known, chosen, where, file, notes)
        rec = structure_record(base, ParallelismSpec, path=where, file=file)
        for kind, name in (("sharding", rec.sharding), ("schedule", rec.schedule)):
            if name in reg.names(kind):
                _check_option_values(option_defaults(reg.get(kind, name).options), opts, where, file)
        return attrs.evolve(rec, options=opts)

    par_rec = parse_par(data.get("parallelism", {}), "parallelism")

    islands = data.get("island", data.get("islands"))
    if islands is None:
        raise ScenarioError("at least one [[island]] is required", path="island", file=file)
    if not isinstance(islands, list) or not islands:
        raise ScenarioError("expected an array of tables [[island]] (at least one)", path="island", file=file)
    isl_recs = []
    for i, isl in enumerate(islands):
        where = f"island[{i}]"
        if not isinstance(isl, dict):
            raise ScenarioError("expected a table", path=where, file=file)
        isl = dict(isl)
        ipar = isl.pop("parallelism", None)
        rec = structure_record(isl, IslandSpec, path=where, file=file)
        if rec.gpu is None:
            raise ScenarioError("required key is missing", path=f"{where}.gpu", file=file)
        _check_tiers(rec, where, file)
        if ipar is not None:
            merged = {**data.get("parallelism", {}), **ipar} if isinstance(ipar, dict) else ipar
            rec = attrs.evolve(rec, parallelism=parse_par(merged, f"{where}.parallelism"))
        if rec.name is None:
            rec = attrs.evolve(rec, name=f"island-{i}" if len(islands) > 1 else "cluster")
        isl_recs.append(rec)
    names = [r.name for r in isl_recs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ScenarioError(f"island name {sorted(dup)[0]!r} is used twice", path="island", file=file)

    network = data.get("network")
    net_rec = None
    if network is not None:
        if isinstance(network, dict) and isinstance(network.get("link"), dict) and "name" not in network["link"]:
            # `--set network.link.bandwidth_gb_s=0.5` without a [network] table: override the default link
            network = {**network, "link": {"name": "internet", **network["link"]}}
        net_rec = structure_record(network, NetworkSpec, path="network", file=file)
    sync_known = {n: set(option_defaults(reg.get("sync", n).options)) for n in reg.names("sync")}
    sync = data.get("sync", {})
    if not isinstance(sync, dict):
        raise ScenarioError("expected a table", path="sync", file=file)
    chosen = sync.get("strategy", "allreduce")
    base, opts = _split_options(sync, _SYNC_FIELDS, sync_known, chosen if isinstance(chosen, str) else "",
                                "sync", file, notes)
    sync_rec = attrs.evolve(structure_record(base, SyncSpec, path="sync", file=file), options=opts)
    if sync_rec.strategy in reg.names("sync"):
        _check_option_values(option_defaults(reg.get("sync", sync_rec.strategy).options), opts, "sync", file)
    if len(isl_recs) < 2 and (data.get("sync") or network is not None):
        notes.append("[sync] and [network] apply only with two islands or more: ignored")

    measured = data.get("measured", {})
    if not isinstance(measured, dict):
        raise ScenarioError("expected a table", path="measured", file=file)
    for k, v in measured.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ScenarioError("expected a finite number", path=f"measured.{k}", file=file)
        if v <= 0:  # every report number is >= 0, and a relative error needs a measurement > 0
            raise ScenarioError(f"expected a number > 0, got {v!r}", path=f"measured.{k}", file=file)
    source = data.get("source", {})
    if not isinstance(source, dict):
        raise ScenarioError("expected a table", path="source", file=file)
    return Scenario(
        model=model_rec,
        training=training_rec,
        islands=tuple(isl_recs),
        parallelism=par_rec,
        network=net_rec,
        sync=sync_rec,
        measured={k: float(v) for k, v in measured.items()},
        source=dict(source),
        notes=tuple(notes),
        file=file,
    )

"""What :func:`~.evaluate.evaluate` returns: :class:`Outputs`, frozen records of arrays with the
unit in each name.

Shapes: a global figure is ``(rows...)`` (one value per plan), a per-island one ``(rows...,
islands)`` (the batch's island axis last); on the scalar path (one plan on one island) every
figure is a plain number. A search scores with ``detail=False``, which leaves the report's
figures (rates, the breakdown, memory by part, the layout's) ``None``; ``islands_only=True`` also
leaves the cross-island ones (``step_time_s``, ``egress_bytes_per_step``) ``None``. Each field says
when it can be ``None``.

:meth:`Outputs.columns` flattens the record to ``{"name": array}`` (``"step_time_s"``,
``"island.step_s"``, ``"island.breakdown.compute_s"``...), the view through which the planner and
the sweep slice and stack chunks; :meth:`Outputs.from_columns` rebuilds it (the pattern of
:meth:`~shardmeter.inputs.bundles.ModelInputs.columns`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
from attrs import AttrsInstance

from shardmeter.numeric.ops import Array

__all__ = [
    "StepTerms",
    "Breakdown",
    "HiddenTerms",
    "Overlapped",
    "MemoryParts",
    "IslandOutputs",
    "Outputs",
    "MemoryProbe",
    "BREAKDOWN_TERMS",
    "map_fields",
    "field_values",
    "evolved",
]

R = TypeVar("R", bound=AttrsInstance)

#: Field metadata key: the field holds a record of this class (flattened as ``name.field``).
_RECORD = "record"


#: :func:`_fields_of` by ``(class, suffix)``: a class's fields are fixed.
_FIELDS: dict[tuple[type, str], tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def _fields_of(cls: type, suffix: str = "") -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """The field names of the attrs class ``cls`` (without ``suffix``) and one getter of all its
    fields' values in field order (``operator.attrgetter``: one C call, not an ``attrs.fields``
    walk and a ``getattr`` per field on every record); computed once per class."""
    got = _FIELDS.get((cls, suffix))
    if got is None:
        names = tuple(f.name for f in attrs.fields(cls))
        many = operator.attrgetter(*names)  # of one name: the value itself
        get: Callable[[Any], tuple[Any, ...]] = many if len(names) > 1 else (lambda rec: (many(rec),))
        got = _FIELDS[(cls, suffix)] = (tuple(n.removesuffix(suffix) for n in names), get)
        if suffix == "":
            _PLAIN[cls] = got
        elif suffix == "_s":
            _SECONDS[cls] = got
    return got


#: :func:`_fields_of` of a class without a suffix and with ``"_s"``, by class alone (read by
#: the callers on every record: one dict lookup, no key tuple to build).
_PLAIN: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}
_SECONDS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def field_values(rec: Any) -> dict[str, Any]:
    """``{field: value}`` of an attrs record, in field order."""
    names, get = _PLAIN.get(type(rec)) or _fields_of(type(rec))
    return dict(zip(names, get(rec)))  # noqa: B905 (one field list: as long; strict= costs 0.4 us)


def evolved(rec: R, **changes: Any) -> R:
    """``attrs.evolve(rec, **changes)`` of a record whose fields are all ``__init__`` arguments
    of their own names (no private or aliased ones): its values read by one getter (4.2 -> 2.9
    us for :class:`~.compute.ComputeTerms`' 13 fields)."""
    return type(rec)(**{**field_values(rec), **changes})


def map_fields(fn: Callable[[Any], Any], rec: R) -> R:
    """``rec`` with ``fn`` applied to each of its fields (one level: a nested record is passed to
    ``fn`` whole)."""
    return type(rec)(**{f.name: fn(getattr(rec, f.name)) for f in attrs.fields(type(rec))})


def _terms(rec: Any) -> dict[str, Array]:
    """``{term: seconds}`` of a record of ``<term>_s`` fields, in field order."""
    keys, get = _SECONDS.get(type(rec)) or _fields_of(type(rec), "_s")
    return dict(zip(keys, get(rec)))  # noqa: B905 (one field list: as long; strict= costs 0.4 us)


@attrs.frozen(kw_only=True)
class StepTerms:
    """An island's own step, term by term (seconds per step, exposed; ``(rows..., islands)``):
    ``compute`` (GEMMs and attention of every micro-batch), ``memory_ops`` (elementwise kernels
    and FP8 casts), the exposed ``tp_comm``, ``cp_comm``, ``ep_comm``, the pipeline's ``pp_comm``
    (point-to-point) and ``pp_bubble``, ``dp_comm`` (the sharding strategy's traffic, per
    micro-batch and per step), activation ``offload`` and the ``optimizer`` step. They add up
    to the island's step (:meth:`total`)."""

    compute_s: Array
    memory_ops_s: Array
    tp_comm_s: Array
    cp_comm_s: Array
    ep_comm_s: Array
    pp_comm_s: Array
    pp_bubble_s: Array
    dp_comm_s: Array
    offload_s: Array
    optimizer_s: Array

    def total(self) -> Array:
        """The terms summed in field order: the island's step (a :class:`Breakdown`'s: the
        global step)."""
        return sum((_PLAIN.get(type(self)) or _fields_of(type(self)))[1](self))

    def terms(self) -> dict[str, Array]:
        """``{term: seconds}``, the names without ``_s``, in report order."""
        return _terms(self)


@attrs.frozen(kw_only=True)
class Breakdown(StepTerms):
    """The step of the average GPU (GPU-weighted over islands; ``(rows...)``), or an island's
    view of the global step (``(rows..., islands)``): the :class:`StepTerms`, the exposed
    ``island_sync`` (the sync strategy's, the same on every island) and ``idle`` (waiting for
    slower islands). They add up to ``step_time_s``. Seconds per step."""

    island_sync_s: Array
    idle_s: Array


#: Names of the breakdown terms, in report order (:class:`Breakdown`'s fields without ``_s``).
BREAKDOWN_TERMS = tuple(f.name.removesuffix("_s") for f in attrs.fields(Breakdown))


@attrs.frozen(kw_only=True)
class HiddenTerms:
    """Communication hidden under compute, seconds per step (``(rows..., islands)``): ``tp_comm``,
    ``cp_comm`` and ``dp_comm``."""

    tp_comm_s: Array
    cp_comm_s: Array
    dp_comm_s: Array

    def terms(self) -> dict[str, Array]:
        """``{term: seconds}``, the names without ``_s``."""
        return _terms(self)


@attrs.frozen(kw_only=True)
class Overlapped(HiddenTerms):
    """The :class:`HiddenTerms` of the average GPU (GPU-weighted, ``(rows...)``) and the island
    sync's hidden time (``island_sync_s``: the cross-island transfer under the islands' own
    steps). Seconds per step."""

    island_sync_s: Array


@attrs.frozen(kw_only=True)
class MemoryParts:
    """The busiest GPU's memory by part, bytes (``(rows..., islands)``): ``weights``,
    ``gradients``, ``optimizer`` (with a sync strategy's extra state), ``activations``,
    ``transient`` (the loss's gradients and the sharding strategy's buffers) and ``other`` (the
    CUDA context, NCCL buffers and cuBLAS workspaces, :mod:`.overheads`); they add up to
    :attr:`IslandOutputs.memory_bytes` (:func:`~.memory.memory_parts`).
    ``outside_allocator_bytes``: the part of ``other`` outside PyTorch's caching allocator (the
    CUDA context and NCCL's buffers), which its ``max_memory_allocated`` and
    ``max_memory_reserved`` leave out; not a part of its own."""

    weights_bytes: Array
    gradients_bytes: Array
    optimizer_bytes: Array
    activations_bytes: Array
    transient_bytes: Array
    other_bytes: Array
    outside_allocator_bytes: Array = 0.0

    def parts(self) -> dict[str, Array]:
        """``{part: bytes}`` under :data:`~.memory.MEMORY_PARTS`' names, in that order (every
        field but the last, ``outside_allocator_bytes``; one getter of them all, as :func:`_terms`)."""
        names, get = _fields_of(MemoryParts, "_bytes")
        return dict(zip(names[:-1], get(self)[:-1]))  # noqa: B905 (one field list: as long)


@attrs.frozen(kw_only=True)
class IslandOutputs:
    """Each island's figures, ``(rows..., islands)``.

    Always: ``feasible`` (no reason bit set, bool), ``step_s`` (the island's own inner step,
    seconds), ``gpus`` (GPUs it uses), ``memory_bytes`` (its busiest GPU at the step's peak),
    ``memory_reserved_bytes`` (what the caching allocator reserves on that GPU then,
    :mod:`.allocator`: what feasibility compares with the GPU's memory), ``memory_capacity_bytes`` (one GPU's memory), ``ar_window_s`` (the window left after its
    last backward pass, where a cross-island all-reduce may hide), ``grad_bytes`` (bytes per
    gradient element it reduces).

    ``None`` without ``detail``: ``memory_parts`` (:class:`MemoryParts`), ``params_per_gpu`` (the
    largest stage's tensor / expert slice) and ``params_per_gpu_sharded`` (what the sharding
    strategy leaves one GPU), ``layers_per_stage`` (of the largest stage), ``batch_sequences``
    (sequences per step), ``micro_batches`` (per replica per step), ``tokens_per_s`` (its share
    of the global batch per global step), ``idle_s`` (seconds per step it waits for slower
    islands), ``utilization`` (its own step over the global step) and ``breakdown`` (its view of
    the global step, :class:`Breakdown`)."""

    feasible: Array
    step_s: Array
    gpus: Array
    memory_bytes: Array
    memory_reserved_bytes: Array
    memory_capacity_bytes: Array
    ar_window_s: Array
    grad_bytes: Array
    memory_parts: MemoryParts | None = attrs.field(default=None, metadata={_RECORD: MemoryParts})
    params_per_gpu: Array | None = None
    params_per_gpu_sharded: Array | None = None
    layers_per_stage: Array | None = None
    batch_sequences: Array | None = None
    micro_batches: Array | None = None
    tokens_per_s: Array | None = None
    idle_s: Array | None = None
    utilization: Array | None = None
    breakdown: Breakdown | None = attrs.field(default=None, metadata={_RECORD: Breakdown})


@attrs.frozen(kw_only=True)
class Outputs:
    """One optimizer step of every plan of the batch (see the module docstring for shapes).

    Always: ``feasible`` (every island feasible, bool, ``(rows...)``), ``reasons`` (each
    island's :class:`~.feasibility.Reason` bits, int, ``(rows..., islands)``), ``params`` (the
    model's parameters, ``(rows...)``) and ``island`` (:class:`IslandOutputs`).

    ``None`` with ``islands_only``: ``step_time_s`` (the global step, seconds) and
    ``egress_bytes_per_step`` (bytes each island sends to the others per step).

    ``None`` without ``detail``: ``memory_bytes`` (the busiest GPU over islands),
    ``memory_reserved_bytes`` (the caching allocator's reserved peak, largest over islands), ``gpus``
    (GPUs used over islands), ``tokens_per_s`` and ``tokens_per_s_per_gpu``,
    ``model_tflops_per_gpu`` and ``hardware_tflops_per_gpu`` (TFLOP/s, without and with
    recompute), ``mfu`` and ``hfu`` (fractions of the GPU-weighted peak),
    ``compute_utilization`` (GPU-weighted share of the step spent on the islands' own steps),
    ``wan_s`` (the WAN's transfer time per step, exposed + hidden) and ``wan_round_s`` (its busy
    time per outer round), ``model_flops_per_token``, ``breakdown`` (:class:`Breakdown`) and
    ``overlapped`` (:class:`Overlapped`)."""

    feasible: Array
    reasons: Array
    params: Array
    island: IslandOutputs = attrs.field(metadata={_RECORD: IslandOutputs})
    step_time_s: Array | None = None
    egress_bytes_per_step: Array | None = None
    memory_bytes: Array | None = None
    memory_reserved_bytes: Array | None = None
    gpus: Array | None = None
    tokens_per_s: Array | None = None
    tokens_per_s_per_gpu: Array | None = None
    model_tflops_per_gpu: Array | None = None
    hardware_tflops_per_gpu: Array | None = None
    mfu: Array | None = None
    hfu: Array | None = None
    compute_utilization: Array | None = None
    wan_s: Array | None = None
    wan_round_s: Array | None = None
    model_flops_per_token: Array | None = None
    breakdown: Breakdown | None = attrs.field(default=None, metadata={_RECORD: Breakdown})
    overlapped: Overlapped | None = attrs.field(default=None, metadata={_RECORD: Overlapped})

    def columns(self) -> dict[str, Array]:
        """``{"name": array}`` of every field that is set, a nested record's as
        ``"record.field"`` (``"island.step_s"``, ``"island.memory_parts.weights_bytes"``)."""
        out: dict[str, Array] = {}
        _flatten(self, "", out)
        return out

    @classmethod
    def from_columns(cls, cols: Mapping[str, Array]) -> Outputs:
        """The inverse of :meth:`columns` (a column left out is ``None``; a nested record is
        ``None`` when none of its columns is given)."""
        return _unflatten(cls, cols, "")


@attrs.frozen(kw_only=True)
class MemoryProbe:
    """What :func:`~.evaluate.island_memory` gives, ``(rows..., islands)``: ``reasons`` (every
    reason bit of :func:`~.evaluate.evaluate`) and ``memory_bytes`` (each island's busiest GPU),
    the same as :attr:`Outputs.reasons` and :attr:`IslandOutputs.memory_bytes`."""

    reasons: Array
    memory_bytes: Array


def _flatten(rec: Any, prefix: str, out: dict[str, Array]) -> None:
    for f in attrs.fields(type(rec)):
        v = getattr(rec, f.name)
        if v is None:
            continue
        if _RECORD in f.metadata:
            _flatten(v, f"{prefix}{f.name}.", out)
        else:
            out[prefix + f.name] = v


def _unflatten(cls: type[R], cols: Mapping[str, Array], prefix: str) -> R:
    kw: dict[str, Any] = {}
    for f in attrs.fields(cls):
        key = prefix + f.name
        sub = f.metadata.get(_RECORD)
        if sub is None:
            if key in cols:
                kw[f.name] = cols[key]
        elif any(k.startswith(f"{key}.") for k in cols):
            kw[f.name] = _unflatten(sub, cols, f"{key}.")
    return cls(**kw)

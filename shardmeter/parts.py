"""What a strategy part is: the behaviour a plugin contributes, and the records it exchanges with the core.

A part *computes* its own terms, array-at-a-time over the rows of a batch of plans; the core
prices communication on the topology and composes the step (``docs/architecture.md``):

* a :class:`ShardingPart` returns the model-state bytes one GPU holds (:class:`StateBytes`) and
  the collectives it issues (:class:`CommEvent`), from :class:`ShardInputs`;
* a :class:`SchedulePart` returns the pipeline bubble, the micro-batches in flight and the
  point-to-point transfers (:class:`PipeTerms`) from :class:`PipeInputs`;
* a :class:`SyncPart` returns the cross-island time and bytes (:class:`SyncTerms`) from
  :class:`WanInputs`;
* a :class:`ConvergencePart` returns the tokens a sync strategy needs to reach the loss
  data-parallel training reaches (:class:`ConvergenceTerms`) from its hyperparameters
  (:class:`ConvergenceInputs`); it prices quality, never time (``docs/convergence.md``);
* a :class:`FrameworkPart` (a software-stack profile, ``training.framework``) returns, at load,
  the ``training.*`` and ``parallelism.*`` defaults its stack uses (``docs/frameworks.md``); it
  computes no term itself: what it carries beyond keys is a part it names (a schedule).

Every array in these records broadcasts against the others of the same call (in the scalar
path, one plan on one island, they are Python floats). The evaluator calls each distinct
(part, options) pair once per batch (never once per plan) on the batch's arrays, and each row
takes the result of its own part (:mod:`shardmeter.model.dispatch`); a part must therefore
compute elementwise, without looking at other rows.

A part's ``options`` is an attrs class; the scenario's keys for it (``[parallelism]`` for
sharding and schedules, ``[sync]`` for sync) are structured into an instance by the project's
converter, so a misspelt or mistyped option is a one-line error naming the key. The instance is
passed to every method as ``opts``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from shardmeter.numeric.ops import Array, where

if TYPE_CHECKING:  # named in a signature only
    from shardmeter.records import HardwareProfile

__all__ = [
    "NoOptions",
    "Part",
    "ShardingPart",
    "SchedulePart",
    "SyncPart",
    "ShardInputs",
    "StateBytes",
    "CommEvent",
    "PipeInputs",
    "PipeTerms",
    "WanInputs",
    "SyncTerms",
    "ConvergencePart",
    "ConvergenceInputs",
    "ConvergenceTerms",
    "FrameworkPart",
    "COLLECTIVES",
    "option_defaults",
    "make_options_class",
]

#: A numpy array over the rows of a batch, or a Python float in the scalar path (one plan).
ArrayLike = Any

#: Collectives the core prices (``docs/architecture.md``, "Pricing a collective").
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")


@attrs.frozen
class NoOptions:
    """The options of a part that reads no scenario key."""


def option_defaults(options: type) -> dict[str, Any]:
    """``{name: default}`` of an options class (every field needs a default)."""
    out = {}
    for f in attrs.fields(options):
        d = f.default
        out[f.name] = d.factory() if isinstance(d, attrs.Factory) else d  # type: ignore[arg-type]
    return out


def make_options_class(name: str, defaults: dict[str, Any]) -> type:
    """An attrs options class from a declarative ``{key: default}`` table (the records' sugar)."""
    fields = {k: attrs.field(default=v, type=type(v)) for k, v in defaults.items()}
    cls_name = "".join(w.capitalize() for w in str(name).replace("-", "_").split("_") if w) + "Options"
    return attrs.make_class(cls_name or "Options", fields, frozen=True, kw_only=True)


@attrs.frozen(kw_only=True)
class Part:
    """Common fields of a behaviour part: ``name`` (unique per kind), ``options`` (an attrs
    class of the keys it reads, with defaults), ``description`` and ``source`` (citation)."""

    kind: ClassVar[str] = ""
    name: str
    options: type = NoOptions
    description: str = ""
    source: str = ""

    def option_defaults(self) -> dict[str, Any]:
        return option_defaults(self.options)


# ---------------------------------------------------------------------------------------------
# sharding


@attrs.frozen(kw_only=True)
class ShardInputs:
    """What a sharding strategy sees of one GPU (arrays, broadcastable).

    ``params_per_gpu``: parameters this GPU's model shard holds before data-parallel sharding
    (its pipeline stage and tensor-parallel slice); ``params_per_layer``: of one layer of it;
    ``layers_per_stage``; ``weight_bytes``/``grad_bytes`` per element; ``optimizer_bytes_per_param``
    (Adam in mixed precision: fp32 master, m and v = 12; 8 in fp32 training);
    ``param_gather_bytes``: bytes per parameter a parameter all-gather moves (the 16-bit copy, 4 in
    fp32 training; with fp8 weights, ``training.fp8_params``, 1 for the layers' matrices, so the
    average over this GPU's parameters); the degrees
    ``tp``, ``dp``, ``cp``; ``domain_gpus``: GPUs of the innermost network tier (a node, or an
    NVLink domain); ``params_largest_module``: of its largest weight matrix (one linear, the
    unit DeepSpeed ZeRO-3 gathers; None: unknown, a layer); ``recompute_layers``: layers of the
    stage whose forward full recompute re-runs in the backward pass (0: none);
    ``params_last_module``: of a layer's last linear in forward order (the MLP's output
    projection; 0: unknown, or a MoE layer's experts).
    """

    params_per_gpu: Array
    params_per_layer: Array
    layers_per_stage: Array
    weight_bytes: Array
    grad_bytes: Array
    optimizer_bytes_per_param: Array
    tp: Array
    dp: Array
    cp: Array
    domain_gpus: Array
    params_largest_module: Array | None = None
    recompute_layers: Array = 0.0
    params_last_module: Array = 0.0
    param_gather_bytes: Array = attrs.field(
        default=attrs.Factory(lambda s: where(s.weight_bytes > 2, 4.0, 2.0), takes_self=True)
    )


@attrs.frozen(kw_only=True)
class StateBytes:
    """Model state one GPU holds, bytes: ``weights`` (with any gathered-layer buffers),
    ``gradients``, ``optimizer``, ``extra`` (anything else the strategy keeps).
    ``param_shards``: how many ways parameter-shaped state is divided (a sync strategy's outer
    state is sharded like the parameters); ``optimizer_shards``: how many ways the optimizer
    update's work is divided."""

    weights: ArrayLike
    gradients: ArrayLike
    optimizer: ArrayLike
    param_shards: ArrayLike = 1.0
    optimizer_shards: ArrayLike = 1.0
    extra: ArrayLike = 0.0


@attrs.frozen(kw_only=True)
class CommEvent:
    """One collective a strategy issues, priced by the core on the island's network tiers.

    * ``collective``: one of :data:`COLLECTIVES`; ``bytes``: the whole buffer ``S`` (an
      all-gather's output, a reduce-scatter's input); ``count``: how many such calls.
    * ``group_size`` ranks ``group_stride`` apart in the rank order (Megatron's: tensor,
      context, data, pipeline from the innermost): the tiers the group spans follow from it.
    * ``flat``: one flat ring over all members, so each GPU's whole share crosses every tier
      (DeepSpeed ZeRO-3 as Narayanan et al. 2021 measured), instead of NCCL's hierarchical
      algorithm that aggregates inside each domain first.
    * ``per``: ``"micro_batch"`` (issued in every micro-batch, prefetched under that
      micro-batch's work) or ``"step"`` (once per step, bucketed under the last backward pass
      when ``[parallelism] dp_comm_overlap`` is on).
    * ``window`` (``"micro_batch"`` events only): the work it may hide under: ``"micro_batch"``
      (all of the micro-batch's work), or only the compute of one pass, ``"forward"``,
      ``"recompute"`` or ``"backward"`` (the head's included), for a strategy that synchronises
      the device between passes' layers so no transfer outlives its pass (DeepSpeed ZeRO-3 before
      4912e0ad7, ``fetch_sync``).
    * ``exposed_fraction``: the share that can never hide (the first layer's gather, which
      nothing precedes); ``bucket_bytes`` / ``bucket_ranks``: the last gradient bucket, reduced
      after the backward pass ends and so always exposed (``None``: not bucketed).
    * ``term``: the breakdown term it counts in.
    """

    collective: str = attrs.field(validator=attrs.validators.in_(COLLECTIVES))
    bytes: ArrayLike
    group_size: ArrayLike
    group_stride: ArrayLike = 1.0
    count: ArrayLike = 1.0
    flat: bool = False
    per: str = attrs.field(default="step", validator=attrs.validators.in_(("micro_batch", "step")))
    window: str = attrs.field(
        default="micro_batch",
        validator=attrs.validators.in_(("micro_batch", "forward", "recompute", "backward")),
    )
    exposed_fraction: ArrayLike = 0.0
    bucket_bytes: ArrayLike | None = None
    bucket_ranks: ArrayLike = 1.0
    term: str = attrs.field(default="dp_comm", validator=attrs.validators.in_(("dp_comm",)))


@attrs.frozen(kw_only=True)
class ShardingPart(Part):
    """How model state is partitioned over the data-parallel group (ZeRO, FSDP, ...)."""

    kind: ClassVar[str] = "sharding"

    def state(self, inp: ShardInputs, opts: Any) -> StateBytes:
        """Model-state bytes on one GPU."""
        raise NotImplementedError

    def traffic(self, inp: ShardInputs, opts: Any) -> Sequence[CommEvent]:
        """The collectives of one step."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# pipeline schedules


@attrs.frozen(kw_only=True)
class PipeInputs:
    """One pipeline stage's view of a step (arrays): ``pp`` stages, ``micro_batches`` per step,
    ``virtual_stages`` (model chunks per GPU; 1 when ``pp = 1``); the time of one micro-batch
    on the stage, ``stage_s`` (forward + backward, with its exposed communication), of which
    ``forward_s`` is the forward pass and ``weight_grad_s`` the weight-gradient GEMMs of the
    backward pass (the part a zero-bubble schedule defers). ``activation_bytes``: the whole
    activation (or its gradient) of one micro-batch at a stage boundary, ``s/cp x b x h`` 16-bit
    elements; ``tp``: the tensor-parallel ranks that hold it (for :attr:`PipeTerms.p2p_bytes`)."""

    pp: Array
    micro_batches: Array
    virtual_stages: Array
    stage_s: Array
    forward_s: Array
    weight_grad_s: Array
    activation_bytes: ArrayLike = 0.0
    tp: ArrayLike = 1.0


@attrs.frozen(kw_only=True)
class PipeTerms:
    """``bubble_s``: idle time per step; ``in_flight``: micro-batches whose activations the
    first stage holds at its peak, in units of one micro-batch through the whole stage;
    ``p2p_transfers``: activation (or gradient) sends per step on the stage's critical path,
    each priced as one message of ``p2p_bytes`` on the link between stages;
    ``p2p_bytes``: what one GPU sends per transfer (``None``: Megatron's scatter-gather,
    ``activation_bytes / tp``); ``infeasible``: rows the schedule cannot run."""

    bubble_s: ArrayLike
    in_flight: ArrayLike
    p2p_transfers: ArrayLike
    infeasible: ArrayLike = False
    p2p_bytes: ArrayLike | None = None


@attrs.frozen(kw_only=True)
class SchedulePart(Part):
    """A pipeline-parallel schedule. ``searched``: whether ``plan`` tries it on a scenario that
    names another schedule (false for one software stack's own engine, which a plan does not
    switch to: ``deepspeed-1f1b``)."""

    kind: ClassVar[str] = "schedule"
    searched: bool = True

    def terms(self, pipe: PipeInputs, opts: Any) -> PipeTerms:
        raise NotImplementedError

    def infeasible(self, pipe: PipeInputs, opts: Any) -> Array:
        """Rows this schedule cannot run (structural: needs ``pp``, ``micro_batches`` and
        ``virtual_stages`` only, so the planner can reject them before the full model)."""
        return where(pipe.pp < 0, True, False)  # nothing is infeasible (shaped like pp)

    def infeasible_message(self, opts: Any) -> str | None:
        """Why rows of :meth:`infeasible` cannot run, for the report (a ``str.format`` template
        that may use ``{m}``, ``{pp}`` and ``{v}``); ``None``: the interleaved schedule's
        message (the micro-batches must be a multiple of ``pp``)."""
        return None

    def in_flight_at(self, pipe: PipeInputs, opts: Any, rank: Array) -> Array:
        """Micro-batches whose activations pipeline rank ``rank`` (0 = first stage) holds at its
        peak, in units of one micro-batch through all of that rank's layers. The default is
        :meth:`terms`' ``in_flight`` (the first stage's count) on every rank but the last, and
        one micro-batch on the last (each one's backward follows its forward there); a schedule
        that knows its warm-up per rank says so here."""
        held = self.terms(pipe, opts).in_flight
        return where((rank >= pipe.pp - 1) & (pipe.pp > 1), 1.0, held)

    def loss_in_flight(self, pipe: PipeInputs, opts: Any) -> Array:
        """Micro-batches whose loss (the fp32 logits the cross-entropy saves for its backward)
        the last stage holds at its peak: 1 where each micro-batch's backward follows its
        forward on the last stage (1F1B, interleaved), the default."""
        return where(pipe.pp < 0, 0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# island synchronisation


@attrs.frozen(kw_only=True)
class WanInputs:
    """The cross-island view (arrays over rows ``(n, 1)`` or rows x islands ``(n, I)``):
    ``islands`` (an int), ``slowest_step_s`` (n, 1), ``island_step_s`` (n, I), ``params``
    of the whole model, ``grad_bytes`` per element, ``uplink_bytes_s`` achieved per island,
    ``latency_s`` per WAN ring step, ``overlap_window_s`` (n, I): backward time left on each
    island after its own data-parallel reduction."""

    islands: int
    slowest_step_s: Array
    island_step_s: Array
    params: Array
    grad_bytes: Array
    uplink_bytes_s: Array
    latency_s: Array
    overlap_window_s: Array


@attrs.frozen(kw_only=True)
class SyncTerms:
    """Per (inner) step, arrays (n, 1): ``exposed_s`` (added to the step), ``wan_s`` (all WAN
    time, exposed + hidden), ``round_s`` (WAN busy time per outer round), ``egress_bytes``
    (bytes each island sends to others per step, (n,))."""

    exposed_s: ArrayLike
    wan_s: ArrayLike
    round_s: ArrayLike
    egress_bytes: ArrayLike


@attrs.frozen(kw_only=True)
class SyncPart(Part):
    """How islands synchronise (only with two islands or more)."""

    kind: ClassVar[str] = "sync"

    def state_bytes_per_param(self, opts: Any) -> float:
        """Extra optimizer state per parameter this strategy keeps (sharded like the weights)."""
        return 0.0

    def exchange(self, wan: WanInputs, opts: Any) -> SyncTerms:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# convergence


@attrs.frozen(kw_only=True)
class ConvergenceInputs:
    """A sync strategy's hyperparameters over a batch of plans (arrays, broadcastable):
    ``params`` of the whole model (N), ``replicas`` that train apart between syncs (M, the
    islands), ``local_steps`` (true: a DiLoCo-family strategy; false: every step synchronous,
    as data-parallel training), ``inner_steps`` (H; 1 when synchronous), ``compression_bits``
    per exchanged element, ``fragments`` (F) and ``overlap_steps`` (tau, resolved: never -1)."""

    params: Array
    replicas: Array
    local_steps: Array
    inner_steps: Array
    compression_bits: Array
    fragments: Array
    overlap_steps: Array


@attrs.frozen(kw_only=True)
class ConvergenceTerms:
    """``tokens_factor`` (>= 1 for the bundled model): tokens needed to reach the loss that
    data-parallel training reaches with the same token budget, over that budget;
    ``in_range``: whether the plan lies inside the model's validity range (its sources)."""

    tokens_factor: ArrayLike
    in_range: ArrayLike


@attrs.frozen(kw_only=True)
class ConvergencePart(Part):
    """How a sync strategy's hyperparameters change the tokens needed to reach a given loss."""

    kind: ClassVar[str] = "convergence"

    def terms(self, inp: ConvergenceInputs, opts: Any) -> ConvergenceTerms:
        """The tokens factor and validity of every row (elementwise)."""
        raise NotImplementedError

    def validity(self) -> dict[str, Any]:
        """The ranges the model's sources cover, for the report (``{}``: not stated)."""
        return {}


# ---------------------------------------------------------------------------------------------
# software-stack profiles


#: A profile's defaults: ``{"training.KEY" | "parallelism.KEY": (value, why)}``.
FrameworkDefaults = dict[str, tuple[Any, str]]


@attrs.frozen(kw_only=True)
class FrameworkPart(Part):
    """A software-stack profile (``training.framework``): the defaults a stack applies when its
    user writes nothing (its attention kernel per GPU generation, sequence parallelism with TP,
    optimizer sharding, overlaps, recompute, fp8 recipe) and, through those keys, the parts that
    carry its behaviour (a schedule that sends activations as its pipeline engine does).

    A profile never carries a speed multiplier: only settings, each with its source.
    """

    kind: ClassVar[str] = "framework"

    #: Behaviour no key states: with ``training.compile = true`` the stack's loss runs under
    #: torch.compile too, so the cross-entropy's fp32 upcast is fused and the backward keeps
    #: the bf16 logits (2 bytes an element, not 4; :func:`~shardmeter.model.memory.logits_bytes_per_element`).
    compiled_loss: ClassVar[bool] = False

    def op_saves_attention(self, attention: str, gpu: HardwareProfile) -> bool:
        """Behaviour no key states: whether the stack's per-operator selective checkpointing
        (``training.recompute = "op"``) saves the attention kernel's outputs on ``gpu`` with
        ``training.attention = attention``. True (the kernel is on its save list); a stack whose
        save list leaves the kernel out returns False, and the model recomputes attention in
        the backward instead of keeping its output and log-sum-exp
        (:func:`~shardmeter.model.activations.activation_bytes_per_layer`)."""
        return True

    def defaults(self, tables: Mapping[str, Any], gpus: Sequence[HardwareProfile]) -> FrameworkDefaults:
        """The defaults this stack sets, ``{dotted key: (value, why)}`` with keys ``training.*``
        or ``parallelism.*``; ``why`` names the stack's own code or documentation.

        :param tables: the scenario's raw tables as written (after ``--set``), ``[model]`` with its
            preset or ``hf_config`` filled in; read them to decide (a key the user wrote is never
            overridden: the loader fills only keys the scenario leaves out).
        :param gpus: the hardware profiles of the scenario's islands (and offers), to decide per
            GPU generation; one the registry does not know yet (a catalog overlay's) is left out.
        """
        raise NotImplementedError

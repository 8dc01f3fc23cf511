"""The records a behaviour part exchanges with the core (:mod:`shardmeter.parts`): what the core
hands a part's methods (``*Inputs``) and what they return (:class:`StateBytes`,
:class:`CommEvent`, :class:`PipeTerms`, :class:`SyncTerms`, :class:`ConvergenceTerms`), and the
declarations a part makes of itself (:class:`ScheduleNeeds`, :class:`SyncHyperparameters`).

Every array in these records broadcasts against the others of the same call (in the scalar
path, one plan on one island, they are Python floats); ``CONTRIBUTING.md`` ("Exchange records")
lists every field with its unit. Importable from :mod:`shardmeter.parts`, where the parts that
use them are.
"""

from __future__ import annotations

from typing import Any

import attrs

from shardmeter.numeric.ops import Array, where

__all__ = [
    "ArrayLike",
    "COLLECTIVES",
    "ShardInputs",
    "StateBytes",
    "CommEvent",
    "PipeInputs",
    "PipeTerms",
    "ScheduleNeeds",
    "WanInputs",
    "SyncTerms",
    "SyncHyperparameters",
    "ConvergenceInputs",
    "ConvergenceTerms",
    "FailureInputs",
    "FailureTerms",
]

#: A numpy array over the rows of a batch, or a Python float in the scalar path (one plan).
ArrayLike = Any

#: Collectives the core prices (``docs/architecture.md``, "Pricing a collective").
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")


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
    average over this GPU's parameters); the degrees ``tp``, ``dp``, ``cp``;
    ``params_largest_module``: of its largest weight matrix (one linear, the unit DeepSpeed
    ZeRO-3 gathers; None: unknown, a layer); ``recompute_layers``: layers of the stage whose
    forward full recompute re-runs in the backward pass (0: none); ``params_last_module``: of a
    layer's last linear in forward order (the MLP's output projection; 0: unknown, or a MoE
    layer's experts).

    MoE: ``expert_params_per_gpu`` of ``params_per_gpu`` are the stage's routed experts (its
    ``experts / ep`` of each MoE layer), replicated over only ``dp x cp / ep`` of the
    data x context-parallel ranks (``ep`` the expert-parallel degree, laid over them; the
    experts' tensor parallelism is ``tp``): a strategy shards their state over that
    expert-data-parallel group, not the whole one (Megatron-Core's ``expert_data_parallel_size
    = world_size // (etp x ep x pp)``; :func:`shardmeter.strategies.zero.expert_shard_group_size`).
    ``expert_tp``: the experts' own tensor parallelism (None: ``tp``; Megatron-Core's
    ``expert_tensor_parallel_size``), the experts' ``expert_tp x ep`` ranks laid over the stage's
    ``tp x cp x dp`` ("MoE parallel folding"), so their data-parallel group is
    ``tp x cp x dp / (expert_tp x ep)``.
    ``pp``: the pipeline-parallel degree (FSDP keeps a stage unsharded under a pipeline schedule).
    ``trainable_fraction``: of ``params_per_gpu``, the share that is trained (1; LoRA's adapters
    on frozen weights, ``training.peft``): ``grad_bytes`` and ``optimizer_bytes_per_param`` are
    already averaged over all the GPU's parameters, so a strategy that prices them per parameter
    needs nothing more; it matters where a strategy moves or keeps trained-only state by its
    own dtype (ZeRO-1/2's all-gather of the updated parameters).

    The island's network, as :class:`~shardmeter.inputs.bundles.Topology` gives it: the whole
    tier list, innermost first, on a trailing tier axis (in the scalar path a tuple, one value
    per tier; :func:`shardmeter.numeric.ops.tier` and :func:`~shardmeter.numeric.ops.n_tiers`
    read either): ``tier_gpus``, the GPUs one domain of each tier joins (a node, an NVLink
    domain, a rail group; ``inf`` for the outermost, the whole island); ``tier_bytes_s``, the
    achieved bandwidth per GPU across that tier, one direction, bytes/s; ``tier_latency_s``,
    seconds per step of a collective algorithm on it. The core always gives them (``None``
    only in a record built by hand). ``domain_gpus``: the first tier's GPUs (a node, or an
    NVLink domain), kept for parts written before the tiers were given.
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
    expert_params_per_gpu: Array = 0.0
    ep: Array = 1.0
    expert_tp: Array | None = None
    pp: Array = 1.0
    trainable_fraction: Array = 1.0
    param_gather_bytes: Array = attrs.field(
        default=attrs.Factory(lambda s: where(s.weight_bytes > 2, 4.0, 2.0), takes_self=True)
    )
    tier_gpus: Array | None = None
    tier_bytes_s: Array | None = None
    tier_latency_s: Array | None = None


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
class ScheduleNeeds:
    """What a pipeline schedule declares it needs of a plan (:meth:`SchedulePart.needs`); the
    host reads this, never the schedule's name or its terms on made-up inputs.

    * ``virtual_stages``: ``"used"`` (its bubble shrinks with the model chunks per GPU: ``plan``
      tries :data:`VIRTUAL_STAGES` for it), ``"ignored"`` (it runs as one chunk whatever
      ``virtual_stages`` says: ``plan`` tries 1) or ``"refused"`` (``virtual_stages > 1`` with
      ``pp > 1`` cannot run: an engine without interleaving).
    * ``min_micro_batches``: micro-batches per step it needs with ``pp > 1`` (1: any).
    * ``interleaved_multiple_of_pp``: with ``virtual_stages > 1`` the micro-batches per step must
      be a multiple of ``pp`` (Megatron-LM's interleaved schedule, Narayanan et al. 2021,
      Sec. 2.2.2).
    * ``interleaved_rounds``: with ``virtual_stages > 1`` the micro-batches must be a multiple of
      the schedule's rounds, ``max(1, m // pp)`` (PyTorch's ``ScheduleInterleaved1F1B``, which
      torchtitan runs: any ``m < 2 pp``, and e.g. ``m = 10`` on ``pp = 4``).
    """

    virtual_stages: str = attrs.field(
        default="ignored", validator=attrs.validators.in_(("used", "ignored", "refused"))
    )
    min_micro_batches: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    interleaved_multiple_of_pp: bool = False
    interleaved_rounds: bool = False


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
class SyncHyperparameters:
    """What a convergence model reads of one sync strategy (:meth:`SyncPart.hyperparameters`):
    ``local_steps`` (true: the replicas train apart between syncs, a DiLoCo-family strategy),
    ``inner_steps`` (H), ``compression_bits`` per exchanged element, ``fragments`` (F) and
    ``overlap_steps`` (tau, resolved: never -1). The defaults are a synchronous strategy's, as
    data-parallel training: every step, 16 bits, one fragment, no overlap."""

    local_steps: bool = False
    inner_steps: float = 1.0
    compression_bits: float = 16.0
    fragments: float = 1.0
    overlap_steps: float = 0.0


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


# ---------------------------------------------------------------------------------------------
# failures and variability


@attrs.frozen(kw_only=True)
class FailureInputs:
    """What a failure model sees of a job (arrays, broadcastable): ``gpus`` and ``nodes`` it
    runs on (every island together) and ``gpus_per_node``."""

    gpus: ArrayLike
    nodes: ArrayLike
    gpus_per_node: ArrayLike


@attrs.frozen(kw_only=True)
class FailureTerms:
    """A failure model's figures for a job: ``failures_per_h`` (unexpected interruptions per
    hour of the whole job: each loses the work since the last checkpoint), ``planned_per_h``
    (planned stops per hour, maintenance: the job checkpoints first, so each costs a restart
    only) and ``restart_s`` (detect, re-schedule, reload, warm up: seconds per interruption)."""

    failures_per_h: ArrayLike
    planned_per_h: ArrayLike
    restart_s: ArrayLike

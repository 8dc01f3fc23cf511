"""ZeRO-1/2/3, FSDP and HSDP: one sharding part whose fields say which state it shards.

Rajbhandari et al. 2020, ZeRO (arXiv 1910.02054), Sec. 5: stage 1 shards the optimizer
states, stage 2 the gradients too, stage 3 the parameters, all-gathered per layer in forward
and again in backward, gradients reduce-scattered per layer. PyTorch FSDP (Zhao et al. 2023,
arXiv 2304.11277) FULL_SHARD moves the same bytes; HYBRID_SHARD shards inside a node and
all-reduces the gradient shards across nodes once per step (Sec. 3.2.2).

The declarative :class:`shardmeter.ShardingStrategy` record is sugar for this part: its flags
become the fields below and its ``options`` table an options class.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array
from shardmeter.parts import CommEvent, ShardingPart, ShardInputs, StateBytes

__all__ = [
    "ZeroSharding",
    "ZeroThreeOptions",
    "LAST_BUCKET_BYTES",
    "shard_group_size",
    "expert_shard_group_size",
    "DEEPSPEED_MAX_LIVE_PARAMETERS",
    "DEEPSPEED_PREFETCH_PARAMETERS",
    "DEEPSPEED_REDUCE_BUCKET_ELEMENTS",
]

#: Gradient bucket (Megatron-LM DDP default 40M elements; PyTorch DDP ``bucket_cap_mb = 25``)
#: whose reduction cannot hide under backward: the last one.
LAST_BUCKET_BYTES = 25e6


#: DeepSpeed ZeRO-3's memory defaults, elements: ``stage3_max_live_parameters``,
#: ``stage3_prefetch_bucket_size`` and ``reduce_bucket_size`` (deepspeed/runtime/zero/config.py,
#: DeepSpeed@edaa722), as :class:`ZeroSharding` fields.
DEEPSPEED_MAX_LIVE_PARAMETERS = 1e9
DEEPSPEED_PREFETCH_PARAMETERS = 5e7
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 5e8


@attrs.frozen(kw_only=True)
class ZeroThreeOptions:
    """``[parallelism]`` keys of ``zero3``.

    ``fetch_sync``: DeepSpeed's ZeRO-3 parameter fetch as it was until 4912e0ad7 (2022-01-20,
    "more fine grained synchronization for communication that allows blocking on less work";
    releases v0.3.13-v0.5.10). Read: deepspeedai/DeepSpeed ``deepspeed/runtime/zero/stage3.py``
    and ``partition_parameters.py`` at v0.3.13 (12a53b43, 2021-03-16): every submodule's
    pre-forward and pre-backward hook (``fetch_sub_module``) waits for all in-flight gathers and
    then ``torch.cuda.synchronize()`` (``_synchronize_communication``), ``_allgather_param``
    synchronises the device again before each all-gather, and ``prefetch_next_sub_modules``
    issues one prefetch (``stage3_prefetch_bucket_size``) only when none is in flight; the
    gradient reduce-scatters (``reduction_stream``, ``overlap_comm`` on for stage 3) are caught
    by the same device-wide synchronisations. So a transfer runs only beside the compute of the
    submodules around it: the forward, recompute and backward passes each hide their own
    transfers and no more (off: the micro-batch's work hides them all)."""

    fetch_sync: bool = False


def fetch_sync_pairs(
    linears: tuple[Array, ...],
) -> tuple[tuple[tuple[Array, Array], ...], tuple[tuple[Array, Array], ...]]:
    """``(forward, backward)`` segment pairs (:class:`~shardmeter.parts.CommEvent` ``paired``)
    of DeepSpeed ZeRO-3's parameter fetch before 4912e0ad7 (``fetch_sync``), from one layer's
    matrices in forward order (``linears``: fused QKV, attention output, MLP in, MLP out; ``()``:
    unknown, no pairs).

    Read at v0.3.13 (12a53b43, deepspeed/runtime/zero/stage3.py): every submodule's pre-forward
    (pre-backward) hook runs ``fetch_sub_module``, which for parameters in flight waits for them
    and ``torch.cuda.synchronize()`` (``_synchronize_communication``), then
    ``prefetch_next_sub_modules`` starts ONE all-gather of the next parameters of the trace not
    yet available, up to ``prefetch_bucket_size`` (5e7) elements, only when none is in flight
    (``if not self.in_flight_handles``). A matrix of a large model (GPT-3 175B: 1.5e8 to 6e8
    elements) fills a bucket alone, so between two synchronisations a matrix's compute runs
    beside the gather of the NEXT matrix only: a layer's pass takes ``sum_k max(g_(k+1), c_k)``.
    Forward (and the recompute's forward): QKV beside the output projection's gather, the
    output projection beside the MLP-in's, MLP-in beside MLP-out's, MLP-out beside the next
    layer's QKV; backward in reverse order, each matrix beside the gather of the one before it.
    Shares: each matrix's parameters of the layer's (the gather), and its GEMMs' share of the
    pass's work, taken as the same share (a linear's FLOPs are ``2 x tokens x parameters``; the
    attention core and elementwise work are spread in proportion)."""
    if not linears:
        return (), ()
    total = linears[0]
    for m in linears[1:]:
        total = total + m
    total = ops.maximum(total, 1e-30)
    share = [m / total for m in linears]
    n = len(share)
    fwd = tuple((share[(k + 1) % n], share[k]) for k in range(n))
    bwd = tuple((share[(k - 1) % n], share[k]) for k in range(n))
    return fwd, bwd


def fetch_sync_reduce_pairs(linears: tuple[Array, ...]) -> tuple[tuple[Array, Array], ...]:
    """Backward segment pairs of DeepSpeed ZeRO-3's gradient reduce-scatters with
    ``fetch_sync`` (:func:`fetch_sync_pairs`' segments and shares; ``()`` where unknown).

    Read at v0.3.13 (12a53b43, deepspeed/runtime/zero/stage3.py): a parameter's gradient joins
    the reduce bucket (``reduce_bucket_size``, 5e8 elements) in its post-backward hook
    (``reduce_independent_p_g_buckets_and_remove_grads``), and the bucket is reduced on the
    ``reduction_stream`` when the NEXT gradient would overflow it (``reduce_ipg_grads``), i.e.
    once the next matrix's backward has produced it. A large model's matrix (1.5e8-6e8 elements)
    is about a bucket, so the reduction of a matrix's gradient is issued as the matrix after it
    (in backward order) finishes, runs beside the compute of the one after that, and is caught
    by that segment's end (the next fetch's ``torch.cuda.synchronize()``): the segment of
    forward index ``k`` carries the reduction of matrix ``k + 2``."""
    if not linears:
        return ()
    total = linears[0]
    for m in linears[1:]:
        total = total + m
    total = ops.maximum(total, 1e-30)
    share = [m / total for m in linears]
    n = len(share)
    return tuple((share[(k + 2) % n], share[k]) for k in range(n))


def shard_group_size(inp: ShardInputs, by_domain: bool) -> Array:
    """Ranks one copy of the state is sharded over: the data x context-parallel group, or with
    ``by_domain`` (HSDP) the replicas of it inside one innermost network domain (a node)."""
    dpcp = inp.dp * inp.cp
    if not by_domain:
        if type(dpcp) is float:  # one plan: ops.maximum written out
            return dpcp if dpcp >= 1.0 else (1.0 if dpcp < 1.0 else math.nan)
        return ops.maximum(dpcp, 1.0)
    per_domain = ops.clip(ops.floor(inp.domain_gpus / (inp.tp * inp.cp)), 1.0, inp.dp) * inp.cp
    return ops.maximum(per_domain, 1.0)


def expert_shard_group_size(inp: ShardInputs, by_domain: bool) -> Array:
    """Ranks one copy of the routed experts' state is sharded over: the shard group
    (:func:`shard_group_size`) divided by ``ep``, since the ``ep`` ranks of each expert-parallel
    group hold different experts (at least 1).

    Megatron-Core lays the experts over ``tp x cp x dp`` and shards their distributed-optimizer
    state over the expert-data-parallel group, ``world_size // (etp x ep x pp)``
    (``megatron/core/parallel_state.py``, ``theoretical_memory_usage.py``'s
    ``expert_data_parallel_size`` since NVIDIA/Megatron-LM#4687, a7c9e8c4); with the experts'
    tensor parallelism equal to ``tp`` that is ``dp x cp / ep``, and ``tp x cp x dp / (etp x
    ep)`` with their own (``expert_tp``, parallel folding). torchtitan's FSDP2 shards the
    experts over the ``dp_shard_mod_ep`` mesh dimension (``efsdp``: the data-parallel shard
    ranks divided by ``ep``), the same group."""
    etp = inp.tp if inp.expert_tp is None else inp.expert_tp
    n, ep = shard_group_size(inp, by_domain), inp.ep
    if set(map(type, (etp, inp.tp, n, ep))) <= ops.ONLY_FLOAT:  # one plan: ops.maximum written out
        nan = math.nan
        folded = inp.tp / (etp if etp >= 1.0 else (1.0 if etp < 1.0 else nan))
        x = n * folded / (ep if ep >= 1.0 else (1.0 if ep < 1.0 else nan))
        return x if x >= 1.0 else (1.0 if x < 1.0 else nan)
    folded = inp.tp / ops.maximum(etp, 1.0)  # experts over tp x cp x dp, each split etp ways
    return ops.maximum(n * folded / ops.maximum(ep, 1.0), 1.0)


@attrs.frozen(kw_only=True)
class ZeroSharding(ShardingPart):
    """State sharded over the data-parallel group (see the module docstring).

    * ``shard_optimizer`` / ``shard_gradients`` / ``shard_parameters``: the ZeRO stages.
    * ``shard_group``: ``"dp"`` (the whole data-parallel group) or ``"node"`` (HSDP: inside
      the innermost network domain, replicated across domains).
    * ``gather_per_layer``: parameters gathered per layer in forward and backward (ZeRO-3 /
      FSDP), prefetched under the micro-batch's work; else gradients are synchronised once per
      step, bucketed under the last backward pass (DDP, ZeRO-1/2).
    * ``flat_collectives``: those gathers run as one flat ring (DeepSpeed ZeRO-3).
    * ``max_live_parameters`` (elements; 0: off): DeepSpeed ZeRO-3's bound on gathered
      parameters; else two gathered layers (FSDP). See :meth:`gathered_bytes`.
    * ``reduce_bucket_elements`` (0: none): DeepSpeed ZeRO-3's gradient reduce (IPG) buffer,
      held for the whole run.
    * ``regather_recompute``: full recompute gathers the layers' parameters again (DeepSpeed
      ZeRO-3's forward hooks fire in the recomputed forward; see :meth:`gathers_per_layer`).
    * ``unsharded_under_pp``: under a pipeline schedule (``pp`` > 1) the stage stays unsharded
      between micro-batches, its gradients accumulated unsharded in fp32 (PyTorch FSDP2 with
      ``torch.distributed.pipelining``; :meth:`pipeline_unsharded_bytes`).
    """

    shard_optimizer: bool = False
    shard_gradients: bool = False
    shard_parameters: bool = False
    shard_group: str = attrs.field(default="dp", validator=attrs.validators.in_(("dp", "node")))
    gather_per_layer: bool = False
    flat_collectives: bool = False
    max_live_parameters: float = 0.0
    prefetch_parameters: float = 0.0
    reduce_bucket_elements: float = 0.0
    regather_recompute: bool = False
    unsharded_under_pp: bool = False

    def infeasible(self, inp: ShardInputs, opts: Any) -> Array:
        """HSDP (``shard_group = "node"``): the shard group (:func:`shard_group_size`, the
        data x context-parallel ranks inside one innermost domain) must divide ``dp x cp`` into
        whole replicas. PyTorch builds HYBRID_SHARD's intra-node groups with
        ``torch.distributed.new_subgroups``, which raises "The world size ... must be divisible
        by 'group_size'" (``torch/distributed/distributed_c10d.py``; FSDP2's ``init_device_mesh``
        likewise needs the (replicate, shard) mesh to tile the group). A shard group of 24 in
        64 ranks would otherwise be priced as 2.67 replicas. Sharding over the whole group
        (``"dp"``) always divides it."""
        if self.shard_group != "node":
            dp = inp.dp
            return dp < 0 if type(dp) is float else ops.where(dp < 0, True, False)  # shaped like dp
        return ops.mod(inp.dp * inp.cp, shard_group_size(inp, True)) != 0

    def bucket_bytes(self, opts: Any) -> float:
        """The last gradient bucket, bytes (always exposed after the backward pass)."""
        return LAST_BUCKET_BYTES

    def gathered_bytes(self, inp: ShardInputs) -> Array:
        """Gathered (unsharded) parameters alive at once, bytes.

        FSDP: two layers, the one computing and the one prefetched (Zhao et al. 2023, Sec. 4.4:
        the rate limiter allows two in-flight all-gathers; each wrapped block is one unit).
        DeepSpeed ZeRO-3 gathers per submodule (each linear), prefetches up to
        ``stage3_prefetch_bucket_size`` elements and releases past ``stage3_max_live_parameters``
        (deepspeed/runtime/zero/partitioned_param_coordinator.py ``fetch_sub_module``, defaults
        1e9 and 5e7 in zero/config.py, DeepSpeed@edaa722): the larger of that bound and the
        largest submodule plus one prefetch bucket, never more than two layers."""
        two_layers = 2.0 * inp.params_per_layer
        if self.max_live_parameters <= 0:
            return two_layers * inp.weight_bytes
        largest = inp.params_per_layer if inp.params_largest_module is None else inp.params_largest_module
        live = ops.maximum(self.max_live_parameters, largest + self.prefetch_parameters)
        return ops.minimum(live, two_layers) * inp.weight_bytes

    def pipeline_unsharded_bytes(self, inp: ShardInputs) -> tuple[Array, Array]:
        """``(weights, gradients)`` FSDP holds unsharded for the whole step under a pipeline
        schedule: the stage's parameters in the gather dtype, and its gradient accumulators in
        fp32, besides the sharded state (0, 0 where ``pp`` = 1 or not ``unsharded_under_pp``).

        torchtitan shards each block with ``reshard_after_forward = not pp_enabled`` under its
        ``"default"`` policy (torchtitan/models/llama3/infra/parallelize.py, ``apply_fsdp``), so
        the gathered stage stays between micro-batches; ``torch.distributed.pipelining``'s stage
        runs every backward but the last under ``set_requires_gradient_sync(False)`` and
        ``set_reshard_after_backward(False)`` (torch/distributed/pipelining/stage.py,
        ``backward_maybe_with_nosync``), and FSDP2 then keeps the gradient unsharded,
        accumulated in the reduce dtype (``FSDPParam.to_accumulated_grad_if_needed``:
        ``self.unsharded_accumulated_grad = unsharded_grad.to(self.reduce_dtype)``), fp32 in
        torchtitan (``mixed_precision_reduce = "float32"``); for the trained parameters only
        (``trainable_fraction``: a frozen one has no gradient)."""
        if not (self.shard_parameters and self.unsharded_under_pp):
            return 0.0, 0.0
        on = ops.where(inp.pp > 1, 1.0, 0.0)
        p = inp.params_per_gpu
        return on * p * inp.param_gather_bytes, on * p * inp.trainable_fraction * 4.0

    def gathers(self, inp: ShardInputs) -> tuple[Array, Array, Array]:
        """Parameter all-gathers of the stage per micro-batch, in layers' worth: ``(forward,
        recompute, backward)``.

        FSDP / ZeRO-3: each layer once in forward and once in backward. DeepSpeed ZeRO-3 with
        ``regather_recompute``: activation checkpointing re-runs each checkpointed layer's
        forward inside the backward pass, and DeepSpeed's module hooks fetch its parameters
        again (``pre_sub_module_forward_function`` -> ``fetch_sub_module``; the post-forward hook
        released them, ``release_sub_module``). After that recomputed forward the layer's last
        submodule is next used by the backward pass that follows at once, a reuse distance of
        zero parameters, under ``stage3_max_reuse_distance`` (1e9), so ``_keep_for_later``
        keeps it and the backward gathers the rest of the layer only (stage3.py@12a53b43,
        ``PrefetchCoordinator.get_reuse_distance_in_numel``). Earlier submodules are further
        from their backward use than any layer's last linear (4 h^2 for GPT-3 175B: 6e8
        elements each; two of them, 1.2e9, separate the first MLP linear from its backward):
        released."""
        ls = ops.maximum(inp.layers_per_stage, 1.0)
        if not self.regather_recompute:
            return ls, 0.0, ls
        rec = ops.minimum(inp.recompute_layers, ls)
        kept = inp.params_last_module / ops.maximum(inp.params_per_layer, 1.0)
        return ls, rec, ls - rec * ops.clip(kept, 0.0, 1.0)

    def state(self, inp: ShardInputs, opts: Any) -> StateBytes:
        """Bytes per GPU: each sharded state divided by the shard group (a MoE stage's routed
        experts by their expert-data-parallel group, :func:`expert_shard_group_size`); ZeRO-3 / FSDP also hold
        the gathered parameters (:meth:`gathered_bytes`) and DeepSpeed ZeRO-3 its reduce bucket
        (``reduce_bucket_size`` elements of the gradient dtype, allocated once with
        ``contiguous_gradients``: zero/stage3.py, DeepSpeed@edaa722), as ``extra``. One plan's
        plain floats without ZeRO-3 over the whole group take :meth:`_state_floats`."""
        if not self.shard_parameters and self.shard_group == "dp":
            one = self._state_floats(inp)
            if one is not None:
                return one
        by_domain = self.shard_group == "node"
        n = shard_group_size(inp, by_domain)
        n_e = expert_shard_group_size(inp, by_domain)
        p, wb = inp.params_per_gpu, inp.weight_bytes
        p_e = ops.minimum(ops.maximum(inp.expert_params_per_gpu, 0.0), p)

        def sharded(on: bool) -> Array:
            """Parameters' worth one GPU keeps of a state sharded (``on``) or not: the
            dense part over ``n``, the routed experts over ``n_e``."""
            return (p - p_e) / n + p_e / n_e if on else p

        w_shards = n if self.shard_parameters else 1.0
        weights = sharded(self.shard_parameters) * wb
        unsharded_w, unsharded_g = self.pipeline_unsharded_bytes(inp)
        if self.shard_parameters:  # the gathered layers, or the whole stage under a pipeline
            gathered = self.gathered_bytes(inp)
            weights = weights + ops.where(ops.as_float(unsharded_w) > 0, unsharded_w, gathered)
        return StateBytes(
            extra=self.reduce_bucket_elements * inp.grad_bytes,
            weights=weights,
            gradients=sharded(self.shard_gradients) * inp.grad_bytes + unsharded_g,
            optimizer=sharded(self.shard_optimizer) * inp.optimizer_bytes_per_param,
            param_shards=w_shards,
            optimizer_shards=n if self.shard_optimizer else 1.0,
        )

    def _state_floats(self, inp: ShardInputs) -> StateBytes | None:
        """:meth:`state` of one plan (plain floats; parameters not sharded, the shard group the
        whole data-parallel group; None otherwise): :func:`shard_group_size` and
        :func:`expert_shard_group_size` of plain floats inline, ``ops.maximum``/``minimum``
        written out (nan where neither side is the larger), the sharded share computed once
        and only where a state is sharded; the same operations in the same order otherwise
        (nothing pipelined unsharded: ``+ 0.0`` as that gives). tests/test_scalar_twins.py
        holds it to the arrays to the bit."""
        tp, ep = inp.tp, inp.ep
        etp = tp if inp.expert_tp is None else inp.expert_tp
        p, e, gb, ob = (
            inp.params_per_gpu,
            inp.expert_params_per_gpu,
            inp.grad_bytes,
            inp.optimizer_bytes_per_param,
        )
        dpcp = inp.dp * inp.cp
        if not set(map(type, (dpcp, tp, ep, etp, p, inp.weight_bytes, e, gb, ob))) <= ops.ONLY_FLOAT:
            return None
        nan = math.nan
        if self.shard_gradients or self.shard_optimizer:
            n = dpcp if dpcp >= 1.0 else (1.0 if dpcp < 1.0 else nan)
            folded = tp / (etp if etp >= 1.0 else (1.0 if etp < 1.0 else nan))
            x = n * folded / (ep if ep >= 1.0 else (1.0 if ep < 1.0 else nan))
            n_e = x if x >= 1.0 else (1.0 if x < 1.0 else nan)
            y = e if e >= 0.0 else (0.0 if e < 0.0 else nan)
            p_e = y if y <= p else (p if p < y else nan)
            part = (p - p_e) / n + p_e / n_e
        else:
            n = part = p  # not read: nothing sharded
        return StateBytes(
            extra=self.reduce_bucket_elements * gb,
            weights=p * inp.weight_bytes,
            gradients=(part if self.shard_gradients else p) * gb + 0.0,
            optimizer=(part if self.shard_optimizer else p) * ob,
            param_shards=1.0,
            optimizer_shards=n if self.shard_optimizer else 1.0,
        )

    def traffic(self, inp: ShardInputs, opts: Any) -> list[CommEvent]:
        """ZeRO-3 / FSDP: per micro-batch and layer two all-gathers of the layer's parameters
        (forward, backward; DeepSpeed ZeRO-3 a third for a full recompute, :meth:`gathers`) and
        a reduce-scatter of its gradients over the shard group (:meth:`layer_traffic`). HSDP
        adds one all-reduce of the gradient shard across domains per step.
        DDP: one all-reduce of the gradients per step; ZeRO-1/2: a reduce-scatter of the
        gradients and an all-gather of the updated parameters (Rajbhandari et al. 2020, Sec. 7:
        the same 2 x volume as an all-reduce)."""
        dpcp = inp.dp * inp.cp
        grad_msg = inp.params_per_gpu * inp.grad_bytes
        param_msg = inp.params_per_gpu * inp.param_gather_bytes  # fp8 weights gather in fp8
        bucket_bytes = self.bucket_bytes(opts)
        if self.gather_per_layer:
            events = self.layer_traffic(inp, opts, param_msg, grad_msg)
            if self.shard_group == "node":
                n = shard_group_size(inp, True)
                events.append(
                    CommEvent(
                        collective="all_reduce",
                        bytes=grad_msg / n,
                        group_size=dpcp / n,
                        group_stride=inp.tp * n,
                        bucket_bytes=bucket_bytes,
                        bucket_ranks=dpcp,
                    )
                )
            return events
        if self.shard_optimizer:
            return [
                CommEvent(
                    collective="reduce_scatter",
                    bytes=grad_msg,
                    group_size=dpcp,
                    group_stride=inp.tp,
                    bucket_bytes=bucket_bytes,
                    bucket_ranks=dpcp,
                ),
                CommEvent(  # the updated parameters: the trained ones only
                    collective="all_gather",
                    bytes=param_msg * inp.trainable_fraction,
                    group_size=dpcp,
                    group_stride=inp.tp,
                    bucket_bytes=bucket_bytes,
                    bucket_ranks=dpcp,
                ),
            ]
        return [
            CommEvent(
                collective="all_reduce",
                bytes=grad_msg,
                group_size=dpcp,
                group_stride=inp.tp,
                bucket_bytes=bucket_bytes,
                bucket_ranks=dpcp,
            )
        ]

    def layer_traffic(
        self, inp: ShardInputs, opts: Any, param_msg: Array, grad_msg: Array
    ) -> list[CommEvent]:
        """ZeRO-3 / FSDP's per-layer collectives over the shard group, per micro-batch: the
        parameter all-gathers of :meth:`gathers` and a reduce-scatter of each layer's gradients
        (``param_msg`` / ``grad_msg``: the stage's bytes), the first gather and the last
        reduction never hidden; with ``fetch_sync`` (:class:`ZeroThreeOptions`) each pass's
        transfers hide under that pass only.

        One collective per layer (the FSDP unit: a transformer block), so each pays its own ring
        latency: 2 L all-gathers (forward, backward) and L reduce-scatters of a layer's share.
        The forward's first all-gather has no compute before it and the backward's last
        reduce-scatter none after it (Zhao et al. 2023, PyTorch FSDP, Sec. 3.3.1, Fig. 5): one of
        the 2 L gathers and one of the L reductions exposed."""
        n = shard_group_size(inp, self.shard_group == "node")
        ls = ops.maximum(inp.layers_per_stage, 1.0)
        g_f, g_r, g_b = self.gathers(inp)
        sync = bool(getattr(opts, "fetch_sync", False))
        layer_ag = dict(
            collective="all_gather",
            bytes=param_msg / ls,
            group_size=n,
            group_stride=inp.tp,
            flat=self.flat_collectives,
            per="micro_batch",
        )
        if sync:  # each pass's gathers on their own, submodule by submodule (:class:`ZeroThreeOptions`)
            fwd, bwd = fetch_sync_pairs(inp.params_layer_linears)
            gathers = [
                CommEvent(count=g_f, window="forward", exposed_fraction=1.0 / g_f, paired=fwd, **layer_ag),
                CommEvent(count=g_r, window="recompute", paired=fwd, **layer_ag),
                CommEvent(count=g_b, window="backward", paired=bwd, **layer_ag),
            ]
        else:  # one event: all hide under the micro-batch's work, the first never
            total = g_f + g_r + g_b
            gathers = [CommEvent(count=total, exposed_fraction=1.0 / total, **layer_ag)]
        return [
            *gathers,
            CommEvent(
                collective="reduce_scatter",
                bytes=grad_msg / ls,
                group_size=n,
                group_stride=inp.tp,
                count=ls,
                flat=self.flat_collectives,
                per="micro_batch",
                window="backward" if sync else "micro_batch",
                exposed_fraction=1.0 / ls,
                paired=fetch_sync_reduce_pairs(inp.params_layer_linears) if sync else (),
            ),
        ]

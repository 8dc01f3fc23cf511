"""shardmeter-zeropp: ZeRO++ as a ShardMeter sharding part.

Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant Model
Training" (arXiv 2306.10209), Sec. 3, builds on ZeRO-3 (Rajbhandari et al. 2020, arXiv
1910.02054, Sec. 5.3: optimizer states, gradients and parameters sharded over the ``N``
data-parallel ranks; per layer, the parameters are all-gathered in forward and again in
backward and the gradients reduce-scattered, ``3 M`` bytes a step for a model of ``M`` bytes).
It cuts that volume with three techniques:

* **qwZ** (Sec. 3.1): the forward all-gather moves block-quantised weights, INT8 instead of
  FP16, half the bytes: ``zeropp_weight_bits / 8`` bytes per parameter instead of 2;
* **hpZ** (Sec. 3.2): after the forward gather each node keeps a secondary FP16 copy of the
  parameters sharded only over the ranks inside the node, so the backward all-gather never
  leaves the node; the price is memory, ``M / n_node`` bytes per GPU, ``n_node`` the
  secondary group (here the data x context-parallel ranks of one node);
* **qgZ** (Sec. 3.3): gradients are reduced as INT4, ``zeropp_gradient_bits / 8`` bytes per
  element, by a hierarchical all-to-all (quantise, reduce inside the node, then across
  nodes), which the core prices as its hierarchical (node-aggregated) reduce-scatter.

Together (INT8, hpZ, INT4) the cross-node volume drops from ``3 M`` to ``0.5 M + 0 + 0.25 M``,
the paper's 4x (abstract and Sec. 3). A component is off at 16 bits (``zeropp_weight_bits = 16``:
no qwZ; ``zeropp_gradient_bits = 16``: no qgZ, the flat reduce-scatter of DeepSpeed ZeRO-3) and
with ``zeropp_hpz = false``; all three off, the part predicts what the bundled ``zero3`` does.
"""

from __future__ import annotations

import attrs
import numpy as np

import shardmeter
from shardmeter.parts import CommEvent, ShardingPart, ShardInputs, StateBytes
from shardmeter.strategies.zero import (
    DEEPSPEED_MAX_LIVE_PARAMETERS,
    DEEPSPEED_PREFETCH_PARAMETERS,
    DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
    ZeroSharding,
    shard_group_size,
)

__version__ = "0.1.0"

__all__ = ["ZeroPPOptions", "ZeroPlusPlus"]

_PAPER = "Wang et al. 2023, ZeRO++ (arXiv 2306.10209), Sec. 3.1-3.3"

#: Bytes per element of the secondary (hpZ) copy: FP16 (Wang et al. 2023, Sec. 3.2).
SECONDARY_BYTES = 2.0

#: DeepSpeed ZeRO-3's gathered parameters and reduce bucket, which ZeRO++ keeps as they are.
_ZERO3 = ZeroSharding(
    name="zero3-memory",
    shard_optimizer=True,
    shard_gradients=True,
    shard_parameters=True,
    gather_per_layer=True,
    max_live_parameters=DEEPSPEED_MAX_LIVE_PARAMETERS,
    prefetch_parameters=DEEPSPEED_PREFETCH_PARAMETERS,
    reduce_bucket_elements=DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
)


def _bits(default: int):
    return attrs.field(default=default, validator=[attrs.validators.ge(1), attrs.validators.le(32)])


@attrs.frozen(kw_only=True)
class ZeroPPOptions:
    """``[parallelism]`` keys ``zeropp`` reads: ``zeropp_weight_bits`` (qwZ, default 8),
    ``zeropp_gradient_bits`` (qgZ, default 4) and ``zeropp_hpz`` (hpZ, default true)."""

    zeropp_weight_bits: int = _bits(8)
    zeropp_gradient_bits: int = _bits(4)
    zeropp_hpz: bool = True


@attrs.frozen(kw_only=True)
class ZeroPlusPlus(ShardingPart):
    """ZeRO-3 with qwZ, hpZ and qgZ (see the module docstring)."""

    options: type = ZeroPPOptions

    @staticmethod
    def _groups(inp: ShardInputs) -> tuple[np.ndarray, np.ndarray]:
        """The primary shard group (data x context parallel) and hpZ's secondary one (its ranks
        inside one innermost network domain, :func:`shard_group_size` with ``by_domain``)."""
        return shard_group_size(inp, False), shard_group_size(inp, True)

    def state(self, inp: ShardInputs, opts: ZeroPPOptions) -> StateBytes:
        """ZeRO-3's bytes (Rajbhandari et al. 2020, Sec. 5.3: every state over ``n`` ranks, plus
        DeepSpeed ZeRO-3's gathered parameters and reduce bucket, ``ZeroSharding.gathered_bytes``)
        and, with hpZ, the secondary FP16 copy over the node's ``n_node`` ranks in ``extra``
        (Wang et al. 2023, Sec. 3.2)."""
        n, n_node = self._groups(inp)
        p, wb = inp.params_per_gpu, inp.weight_bytes
        secondary = p * SECONDARY_BYTES / n_node if opts.zeropp_hpz else 0.0
        return StateBytes(
            weights=p * wb / n + _ZERO3.gathered_bytes(inp),
            gradients=p * inp.grad_bytes / n,
            optimizer=p * inp.optimizer_bytes_per_param / n,
            param_shards=n,
            optimizer_shards=n,
            extra=secondary + _ZERO3.reduce_bucket_elements * inp.grad_bytes,
        )

    def traffic(self, inp: ShardInputs, opts: ZeroPPOptions) -> list[CommEvent]:
        """Per micro-batch, over the ``n`` ranks ``tp`` apart unless said otherwise:

        * forward all-gather of ``P * min(b_w / 8, w)`` bytes (qwZ; ``w``: the unquantised
          width, 2 bytes in 16-bit training), a flat ring as DeepSpeed ZeRO-3's;
        * backward all-gather: with hpZ from the secondary copy, ``P * 2`` bytes over the node's
          ``n_node`` ranks; without, the forward gather again;
        * reduce-scatter of ``P * min(b_g / 8, g)`` gradient bytes (qgZ, hierarchical; flat at
          ``b_g >= 16``, where qgZ is off);

        each issued per layer (``L`` calls of a layer's share, as ZeRO-3's), with ZeRO-3's
        never-hidden share: the forward's first gather and the backward's last reduction."""
        n, n_node = self._groups(inp)
        p = inp.params_per_gpu
        w_full = np.where(inp.weight_bytes > 2, 4.0, 2.0)
        w_bytes = np.minimum(opts.zeropp_weight_bits / 8.0, w_full)
        g_bytes = np.minimum(opts.zeropp_gradient_bits / 8.0, inp.grad_bytes)
        ls = np.maximum(inp.layers_per_stage, 1.0)

        def event(collective: str, nbytes, group, flat: bool, exposed: bool) -> CommEvent:
            return CommEvent(
                collective=collective,
                bytes=nbytes / ls,
                group_size=group,
                group_stride=inp.tp,
                count=ls,
                flat=flat,
                per="micro_batch",
                exposed_fraction=np.where(exposed, 1.0 / ls, 0.0),
            )

        forward = event("all_gather", p * w_bytes, n, True, True)
        if opts.zeropp_hpz:
            backward = event("all_gather", p * SECONDARY_BYTES, n_node, False, False)
        else:
            backward = event("all_gather", p * w_bytes, n, True, False)
        grads = event("reduce_scatter", p * g_bytes, n, opts.zeropp_gradient_bits >= 16, True)
        return [forward, backward, grads]


@shardmeter.hookimpl
def shardmeter_sharding_strategies():
    yield ZeroPlusPlus(
        name="zeropp",
        description="ZeRO++: ZeRO-3 with quantised weight all-gathers (qwZ, zeropp_weight_bits, INT8), a "
        "node-local secondary FP16 copy of the parameters so the backward gather stays in the node (hpZ, "
        "zeropp_hpz, costs parameters / node ranks of memory) and quantised hierarchical gradient reduction "
        "(qgZ, zeropp_gradient_bits, INT4). 16 bits turns qwZ / qgZ off.",
        source=_PAPER,
    )

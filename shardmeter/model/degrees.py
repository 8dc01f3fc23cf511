"""The layout's parallel degrees as the model's stages compute with them."""

from __future__ import annotations

import attrs

from shardmeter.inputs.bundles import Layout
from shardmeter.numeric import ops
from shardmeter.numeric.ops import Array

__all__ = ["Degrees", "degrees"]


@attrs.frozen(kw_only=True)
class Degrees:
    """Parallel degrees, floats (``(rows..., islands)``, or numbers on the scalar path): ``tp``,
    ``pp``, ``dp``, ``cp``, ``ep``; ``v``: virtual stages per pipeline rank (1 where ``pp = 1``:
    interleaving one stage is a no-op); ``sp``: sequence parallelism (bool); ``etp``: the routed
    experts' tensor parallelism (``tp`` unless ``parallelism.expert_tp`` says otherwise)."""

    tp: Array
    pp: Array
    dp: Array
    cp: Array
    ep: Array
    v: Array
    sp: Array
    etp: Array = 1.0

    @property
    def gpus(self) -> Array:
        """GPUs one island's layout uses: ``tp x pp x cp x dp``."""
        return self.tp * self.pp * self.cp * self.dp


def degrees(lay: Layout) -> Degrees:
    """:class:`Degrees` of a :class:`~shardmeter.inputs.bundles.Layout`."""
    f = ops.as_float
    pp, tp = f(lay.pp), f(lay.tp)
    return Degrees(
        tp=tp,
        etp=ops.where(f(lay.expert_tp) > 0, f(lay.expert_tp), tp),
        pp=pp,
        dp=f(lay.dp),
        cp=f(lay.cp),
        ep=f(lay.ep),
        v=ops.where(pp > 1, ops.maximum(f(lay.virtual_stages), 1.0), 1.0),
        sp=ops.as_bool(lay.sequence_parallel),
    )

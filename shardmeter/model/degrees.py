"""The layout's parallel degrees as the model's stages compute with them."""

from __future__ import annotations

import math
import operator

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
    pp, tp, dp, cp, ep, etp, v, sp = _DEGREE_FIELDS(lay)
    if set(map(type, (pp, tp, dp, cp, ep, etp, v))) <= ops.ONLY_FLOAT and type(sp) is bool:
        # one plan: each where the value it picks, the maximum written out (nan as numpy's)
        v = (v if v >= 1.0 else (1.0 if v < 1.0 else math.nan)) if pp > 1 else 1.0
        return Degrees(tp=tp, etp=etp if etp > 0 else tp, pp=pp, dp=dp, cp=cp, ep=ep, v=v, sp=sp)
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


#: The layout's fields :func:`degrees` reads (one C call).
_DEGREE_FIELDS = operator.attrgetter(
    "pp", "tp", "dp", "cp", "ep", "expert_tp", "virtual_stages", "sequence_parallel"
)

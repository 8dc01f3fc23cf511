"""Base room: elementwise operations that run on numpy arrays and on plain floats alike
(:mod:`.ops`, the scalar fast path keeps numpy's semantics) and reductions over the island axis
(:mod:`.reduce`). Shared by the model, the parts contract and the bundled strategies.

May import: nothing of ShardMeter but :mod:`shardmeter.errors`."""

"""``shardmeter calibrate``: catalog overlays fitted to a user's own cluster (docs/calibration.md).

Modules, one job each: :mod:`.nccl` (nccl-tests logs -> link latency and bandwidth per tier),
:mod:`.gemm` (a GEMM timing CSV -> matmul efficiency), :mod:`.steps` (measured training steps
-> the remaining efficiencies), :mod:`.lsq` (the least squares they share), :mod:`.overlay`
(reading an overlay into a registry, writing one) and :mod:`.cli` (the sub-command).

Nothing is imported here: :mod:`shardmeter.resolve` imports :mod:`.overlay` alone.
"""

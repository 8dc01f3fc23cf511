"""``shardmeter calibrate``: catalog overlays fitted to a user's own cluster (docs/calibration.md).

Modules, one job each: :mod:`.nccl` (nccl-tests logs -> link latency and bandwidth per tier),
:mod:`.gemm` (a GEMM timing CSV -> matmul efficiency), :mod:`.steps` (measured training steps
-> the remaining efficiencies), :mod:`.lsq` (the least squares they share), :mod:`.overlay_out`
(the overlay's TOML text) and :mod:`.cli` (the sub-command). Overlays are read and applied by the
resolve stage (:mod:`shardmeter.resolve.overlay`), which never imports calibrate.

May import: the estimator, validate and every stage. Never explore, the importers or the CLI.
"""

"""``shardmeter calibrate``: catalog overlays fitted to a user's own cluster (docs/calibration.md).

Modules, one job each: :mod:`.nccl_log` (reading nccl-tests logs: launcher prefixes, several
runs per file, the columns by name), :mod:`.nccl` (the runs -> each collective's and the link's
latency and bandwidth per tier, plausibility checked),
:mod:`.gemm` (a GEMM timing CSV -> matmul efficiency), :mod:`.steps` (measured training steps
-> the remaining efficiencies), :mod:`.lsq` (the least squares they share), :mod:`.overlay_out`
(the overlay's TOML text) and :mod:`.cli` (the sub-command). Overlays are read and applied by the
resolve stage (:mod:`shardmeter.resolve.overlay`), which never imports calibrate.

May import: the estimator, validate and every stage. Never explore, the importers or the CLI.
"""

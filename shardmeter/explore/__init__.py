"""``sweep``, ``plan`` and ``sensitivity``, on top of the stages: :mod:`.search` (the spaces
and the searches), :mod:`.formats` (tables, CSV, plots, result records), :mod:`.execution`
(processes, dask, progress, the allocator), with the command parsers in :mod:`.cli` and their
runners in :mod:`.commands`.

May import: the estimator, validate and every stage. Inside: execution <- search <- formats <-
cli/commands (a room imports only those before it). Never the importers, calibrate or the CLI."""

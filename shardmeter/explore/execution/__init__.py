"""How explore runs its chunks: local processes and dask (:mod:`.executors`,
:mod:`.dask_probe`), progress bars (:mod:`.progress`) and the glibc allocator thresholds
(:mod:`.allocator`).

May import: the base rooms only; it knows nothing of the model."""

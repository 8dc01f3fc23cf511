"""Bundled behaviour parts (ZeRO/FSDP sharding, pipeline schedules, island sync, a convergence
model), registered by :mod:`.builtin` through the ``shardmeter`` entry-point group like any
third-party plugin.

May import: only the public API, as a third party would: the package itself, ``parts``,
``records``, ``errors``, ``numeric`` and ``registry.catalog``. The core never imports these
modules; it names them by dotted strings."""

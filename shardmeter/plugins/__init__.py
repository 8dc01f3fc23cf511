"""Bundled data plugins (GPUs, links, prices from ``hardware_catalog/*.toml``) and the
software-stack profiles (:mod:`.frameworks`), registered through the ``shardmeter`` entry-point
group like any third-party plugin.

May import: only the public API, as a third party would: the package itself, ``parts``,
``records``, ``errors``, ``numeric`` and ``registry.catalog``."""

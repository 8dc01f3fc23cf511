"""Stage 3, inputs: a :class:`~shardmeter.resolve.resolver.Resolved` scenario -> the model's
typed input bundles (:mod:`.bundles`: ``ModelShape``, ``Training``, ``Hardware``, ``Topology``,
``Layout``, ``Network``, units in every name, and the ``PartTable`` of strategy codes), built by
:mod:`.build`; arrays of shape ``(1, islands)``, or floats for the scalar path.

May import: the base rooms, the contract, the registry, load and resolve. Never the model."""

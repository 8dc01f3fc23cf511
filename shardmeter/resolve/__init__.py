"""Stage 2, resolve: a :class:`~shardmeter.load.scenario.Scenario` and the registry -> one
frozen :class:`~.resolver.Resolved`: every part name replaced by its record or part, options
structured, tiers listed, data-parallel degrees filled (:mod:`.resolver`); catalog overlays read
and applied (:mod:`.overlay`). Later stages never look a name up again.

May import: the base rooms, the contract, the registry and load. Never inputs or later."""

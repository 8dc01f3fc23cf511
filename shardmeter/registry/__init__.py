"""The plugin registry: the pluggy manager and the :class:`~.manager.Registry` of parts
(:mod:`.manager`, broken plugins isolated and named), part-name rules (:mod:`.names`), records
from TOML data (:mod:`.catalog`), the strict cattrs converter and its one-line errors
(:mod:`.convert`), and looking a part reference up (:mod:`.lookup`).

May import: the base rooms (``errors``, ``io``, ``numeric``, ``tables``) and the contract
(``parts``, ``records``, ``hookspecs``). Never a stage, never a bundled plugin module (those are
named by dotted strings in :data:`.manager.BUNDLED`)."""

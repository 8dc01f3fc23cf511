"""Stage 1, load: a TOML file, a dict or ``--set`` overrides -> a frozen
:class:`~.scenario.Scenario` (:mod:`.scenario`; the records in :mod:`.specs`, strict TOML and
presets in :mod:`.files`, strategy options split and checked in :mod:`.options`, ``--set``
paths in :mod:`.overrides`, Hugging Face configs in :mod:`.hf_config`, ``[[offer]]`` regions in
:mod:`.offers`). A framework profile's defaults are applied here, to the raw tables
(:mod:`.framework_defaults`).

May import: the base rooms, the contract and the registry. Never resolve or any later stage."""

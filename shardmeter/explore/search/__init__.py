"""The searches: variant columns built from resolved records, scored by the model in chunks
(``plan``, the per-island planner, ``sweep``, ``sensitivity``) and what they rank by.

May import: explore.execution and every stage below explore. Never explore.formats."""

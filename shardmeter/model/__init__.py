"""Stage 4, the model: ``evaluate(inputs, parts) -> Outputs``, one optimizer step of a batch of
plans, vectorised over plans and islands (:mod:`.evaluate`; compute, communication, memory,
feasibility and the islands combined in modules of their own; docs/architecture.md).

May import: the base rooms, the contract (``parts``: the records a part exchanges) and inputs.
Never a name, a ``Scenario``, the ``Registry`` or a later stage."""

"""Stage 5, report: a :class:`~shardmeter.resolve.resolver.Resolved` scenario and one row of the
model's outputs -> a :class:`~.build.Report` (:mod:`.build`), with its prices (:mod:`.pricing`),
words (:mod:`.words`), quality (:mod:`.quality`), confidence band looked up in the stored table
(:mod:`.confidence`), and its own text and notebook forms (:mod:`.text`, :mod:`.notebook`).

May import: every earlier stage (load, resolve, inputs, model) and the base rooms. Never render,
the estimator or a tool."""

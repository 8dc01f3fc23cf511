"""``shardmeter validate``: published runs predicted and compared (:mod:`.run`), and the table
the report's confidence band is looked up in, built from them (:mod:`.confidence_table`).

May import: the estimator and every stage below it. Never explore, the importers or the CLI."""

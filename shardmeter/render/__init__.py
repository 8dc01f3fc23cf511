"""Stage 6, render: reports turned into what people read: strict JSON (:mod:`.json`), the
``--plot`` PNG (:mod:`.plots`), the SVG charts (:mod:`.charts`) and the one-page HTML report
(:mod:`.page`). Rendering runs no estimate.

May import: the report and every earlier room. Never the estimator or a tool."""

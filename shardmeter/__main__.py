"""``python -m shardmeter``: the same as the ``shardmeter`` command."""

from __future__ import annotations

import sys

from shardmeter.cli.app import main

if __name__ == "__main__":
    sys.exit(main())

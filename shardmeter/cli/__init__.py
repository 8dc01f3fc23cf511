"""The command line (top of the house): ``shardmeter COMMAND``. May import every room."""

from shardmeter.cli.app import main

__all__ = ["main"]

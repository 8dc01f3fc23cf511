"""Errors users see as one line (exit code 2 from the CLI)."""

from __future__ import annotations

__all__ = ["ShardMeterError", "ScenarioError", "PluginError"]


class ShardMeterError(Exception):
    """Base class of every error the CLI turns into a one-line message."""


class ScenarioError(ShardMeterError):
    """A scenario (file, dict or override) is malformed: names the file and key path."""

    def __init__(self, message: str, *, path: str = "", file: str | None = None):
        self.message = message
        self.path = path
        self.file = file
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.file, f"$.{self.path}" if self.path else "") if p]
        return ": ".join([*parts, self.message])

    def with_file(self, file: str) -> ScenarioError:
        return ScenarioError(self.message, path=self.path, file=file)


class PluginError(ShardMeterError):
    """A plugin failed to load, raised in a hook, or clashes with another."""

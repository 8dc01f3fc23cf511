"""Fixtures several test modules share."""

from __future__ import annotations

import sys

import pytest
from shared_scenarios import THREE_ISLANDS

import shardmeter

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.fixture(scope="module")
def est():
    """An Estimator over the installed plugins (a module may define its own)."""
    return shardmeter.Estimator()


@pytest.fixture(scope="module")
def three():
    """The raw tables of examples/multi-island/three-islands.toml."""
    return tomllib.loads(THREE_ISLANDS.read_text())

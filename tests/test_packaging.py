"""Packaging metadata: the LICENSE file matches the declared licence, the project names its home
and authors, and the ``all`` extra installs every optional feature."""

from __future__ import annotations

import pathlib
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_license_file_matches_declared_licence():
    assert PROJECT["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text.splitlines()[1]
    assert "Version 2.0, January 2004" in text
    assert any("Apache Software License" in c for c in PROJECT["classifiers"])


def test_metadata_names_authors_and_urls():
    assert PROJECT["authors"] and all(a.get("name") for a in PROJECT["authors"])
    assert {"Homepage", "Documentation", "Issues"} <= set(PROJECT["urls"])
    assert all(u.startswith("https://") for u in PROJECT["urls"].values())


def test_all_extra_covers_every_feature_extra():
    extras = PROJECT["optional-dependencies"]
    (spec,) = extras["all"]
    named = set(re.fullmatch(r"shardmeter\[(.+)\]", spec).group(1).split(","))
    assert named == set(extras) - {"all", "test"}


def test_declared_pythons_are_the_tested_ones():
    assert PROJECT["requires-python"] == ">=3.10"
    versions = {c.rsplit(":: ", 1)[1] for c in PROJECT["classifiers"] if re.search(r":: 3\.\d+$", c)}
    assert {"3.10", "3.13"} <= versions

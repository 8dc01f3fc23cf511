"""A throwaway virtual environment with plugin distributions pip-installed into it, shared by
``test_third_party_plugin.py`` and ``test_example_plugins.py`` (imported as a plain module:
pytest puts ``tests/`` on ``sys.path`` for the test files in it).

The environment is made with ``--system-site-packages`` so the installed ShardMeter and its
dependencies are visible without a network, and the distributions are installed with one
``pip install --no-deps`` (``--no-build-isolation`` where the installed setuptools can build a
wheel offline). Each distribution is copied into the temporary directory first: nothing is ever
built in the repository.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import site
import subprocess
import sys
from collections.abc import Iterable, Sequence

import pytest

import shardmeter

#: Skip a test module unless pip and setuptools can build and install distributions.
needs_pip = pytest.mark.skipif(
    importlib.util.find_spec("pip") is None or importlib.util.find_spec("setuptools") is None,
    reason="needs pip and setuptools to build and install the plugin distributions",
)


def norm(name: str) -> str:
    """A distribution name compared the PEP 503 way."""
    return re.sub(r"[-_.]+", "-", name).lower()


def offline_build_possible() -> bool:
    """``--no-build-isolation`` builds with the setuptools already installed:
    setuptools >= 70.1 builds wheels by itself, older ones need ``wheel``."""
    from importlib.metadata import version as dist_version  # importing setuptools here would upset distutils

    version = tuple(int(x) for x in re.findall(r"\d+", dist_version("setuptools"))[:2])
    return version >= (70, 1) or importlib.util.find_spec("wheel") is not None


class Venv:
    """A virtual environment: ``run`` the ``shardmeter`` CLI (or ``python -m shardmeter``) in it,
    with the plugins named in ``disable`` (entry-point or distribution names) switched off."""

    def __init__(self, path: pathlib.Path, workdir: pathlib.Path, disable: Sequence[str] = ()):
        self.path = path
        self.workdir = workdir
        self.python = path / "bin" / "python"
        self.shardmeter = path / "bin" / "shardmeter"
        self.disable = tuple(disable)

    def env(self, disable: Iterable[str] | None = None, strict: bool = False) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDMETER_")}
        env.pop("PYTHONPATH", None)
        disable = self.disable if disable is None else tuple(disable)
        if disable:
            env["SHARDMETER_DISABLE_PLUGINS"] = ",".join(disable)
        if strict:
            env["SHARDMETER_STRICT_PLUGINS"] = "1"
        return env

    def run(
        self, *args: str, disable: Iterable[str] | None = None, strict: bool = False, module: bool = False
    ):
        cmd = [str(self.python), "-m", "shardmeter", *args] if module else [str(self.shardmeter), *args]
        return subprocess.run(
            cmd, capture_output=True, text=True, env=self.env(disable, strict), cwd=self.workdir, timeout=120
        )


def _probe(python: pathlib.Path, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    code = (
        "import importlib.metadata as md, shardmeter.plugins.hardware, shardmeter.cli.app; md.version('shardmeter'); "
        "print(shardmeter.__file__)"
    )
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=cwd)


def make_venv(tmp: pathlib.Path, dists: Sequence[pathlib.Path], disable: Sequence[str] = ()) -> Venv:
    """A virtual environment under ``tmp`` with the distributions in the folders ``dists``
    installed by one ``pip install`` (skips the test module where ShardMeter is not installed)."""
    path = tmp / "venv"
    # --without-pip: the base interpreter's pip is visible through the system site-packages.
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    v = Venv(path, tmp, disable)
    # When the tests themselves run inside a virtual environment, --system-site-packages
    # reaches only the base interpreter's: make the running environment's site-packages
    # (with their .pth files, e.g. an editable install) visible too.
    purelib = subprocess.run(
        [str(v.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    outer = [d for d in site.getsitepackages() if os.path.isdir(d)]
    lines = ["import site; " + "; ".join(f"site.addsitedir({d!r})" for d in outer)]
    pth = pathlib.Path(purelib, "_shardmeter_outer_env.pth")
    pth.write_text("\n".join(lines) + "\n")
    # The environment must run the ShardMeter under test (the metadata, version and bundled entry
    # points, are the installed distribution's): where the installed package is another copy, or
    # gone (an editable install of another checkout), put this one first on the path.
    here = pathlib.Path(shardmeter.__file__).resolve()
    probe = _probe(v.python, tmp)
    if probe.returncode != 0 or pathlib.Path(probe.stdout.strip()).resolve() != here:
        lines.append(f"import sys; sys.path.insert(0, {str(here.parents[1])!r})")
        pth.write_text("\n".join(lines) + "\n")
        probe = _probe(v.python, tmp)
    if probe.returncode != 0:
        pytest.skip("shardmeter is not installed (pip install -e .) so a virtual environment cannot see it")
    # The console script `pip install shardmeter` creates; the base environment's is not on the venv's path.
    v.shardmeter.write_text(
        f"#!{v.python}\nimport sys\nfrom shardmeter.cli.app import main\nsys.exit(main())\n"
    )
    v.shardmeter.chmod(0o755)

    src = tmp / "src"
    built = []
    for d in dists:
        d = pathlib.Path(d)
        if src in d.parents:
            built.append(d)
            continue
        built.append(
            shutil.copytree(
                d, src / d.name, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
            )
        )  # build in tmp, never in the repo
    pip = [str(v.python), "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "--no-input"]
    if offline_build_possible():
        pip.append("--no-build-isolation")
    out = subprocess.run([*pip, *map(str, built)], capture_output=True, text=True, cwd=tmp, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return v

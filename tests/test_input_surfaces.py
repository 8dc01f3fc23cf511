"""Every command-line surface that reads a file, given a file it must refuse (issue 25 item 1):
a FIFO (which would block ``open`` forever), a directory, bytes that are not UTF-8 and a file
over the size limit. Each ends at once with exit 2 and one line on stderr naming the file,
whether the file is the command's argument, an option's, standard input, or a path written in
a scenario (``catalog``, ``model.hf_config``) or given with ``--set``.

Each case runs ``python -m shardmeter`` in a subprocess with a timeout, so a surface that opens
the FIFO fails the test instead of hanging the suite. A static check holds that no module of
``shardmeter/`` other than the reader opens a file itself.

``validate`` and ``report --validation`` take folders too, and SCENARIO.md ("Validation") makes
an unreadable scenario among them a failed case, listed, not an error: for those a directory
is a folder holding the FIFO (never opened), and a bad file given to them is a failed case
whose line names the file.
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent

SCENARIO = """[model]
layers = 8
hidden = 2048
heads = 16
vocab = 32000
seq_len = 2048
[training]
global_batch = 64
tokens = 2e9
[[island]]
name = "c"
gpu = "a100-sxm-40gb"
nodes = 2
gpus_per_node = 4
inter_node = "ib-hdr"
"""

#: Larger than every reader's limit (16 MiB); written sparse, so it costs no disk.
OVERSIZE = 17 * 1024 * 1024

#: The base name every bad file has, so a message can be checked to name it.
BAD = "bad-input"

KINDS = ("fifo", "directory", "not-utf8", "oversize")

#: surface -> (the bad file's suffix, argv with {bad} / {good} / {out}, scenario text naming
#: {bad} written to {good} instead of SCENARIO, how a bad *file* is reported: "error" (exit 2)
#: or "case" (a failed validation case), whether a directory is a folder input).
SURFACES: dict[str, tuple[str, list[str], str | None, str, bool]] = {
    "estimate": (".toml", ["estimate", "{bad}"], None, "error", False),
    "sweep": (".toml", ["sweep", "{bad}", "--vary", "training.micro_batch=1,2"], None, "error", False),
    "plan": (".toml", ["plan", "{bad}", "--top", "1"], None, "error", False),
    "sensitivity": (".toml", ["sensitivity", "{bad}"], None, "error", False),
    "report": (".toml", ["report", "{bad}", "--html", "{out}.html"], None, "error", False),
    "report --validation": (
        ".toml",
        ["report", "{good}", "--html", "{out}.html", "--validation", "{bad}"],
        None,
        "case",
        True,
    ),
    "validate": (".toml", ["validate", "{bad}"], None, "case", True),
    "import hf": (".json", ["import", "hf", "{bad}"], None, "error", False),
    "import torchtitan toml": (".toml", ["import", "torchtitan", "{bad}"], None, "error", False),
    "import torchtitan registry": (
        ".py",
        ["import", "torchtitan", "{bad}", "--config", "llama3_8b"],
        None,
        "error",
        False,
    ),
    "import megatron script": (".sh", ["import", "megatron", "{bad}"], None, "error", False),
    "import megatron recipe": (
        ".py",
        ["import", "megatron", "{bad}", "--config", "pretrain"],
        None,
        "error",
        False,
    ),
    "init --hf-config": (".json", ["init", "--hf-config", "{bad}"], None, "error", False),
    "calibrate log": (".txt", ["calibrate", "{bad}", "--out", "{out}.toml"], None, "error", False),
    "calibrate csv": (
        ".csv",
        ["calibrate", "{bad}", "--gpu", "h100-sxm", "--out", "{out}.toml"],
        None,
        "error",
        False,
    ),
    "calibrate steps": (".toml", ["calibrate", "{bad}", "--out", "{out}.toml"], None, "error", True),
    "--set catalog=": (".toml", ["estimate", "{good}", "--set", "catalog={bad}"], None, "error", False),
    "scenario catalog": (".toml", ["estimate", "{good}"], 'catalog = "{bad}"\n' + SCENARIO, "error", False),
    "scenario hf_config": (
        ".json",
        ["estimate", "{good}"],
        SCENARIO.replace("layers = 8\n", 'hf_config = "{bad}"\n'),
        "error",
        False,
    ),
    "sweep --set catalog=": (
        ".toml",
        ["sweep", "{good}", "--vary", "training.micro_batch=1,2", "--set", "catalog={bad}"],
        None,
        "error",
        False,
    ),
    "sweep --resume": (
        ".csv",
        ["sweep", "{good}", "--vary", "training.micro_batch=1,2", "--csv", "{bad}", "--resume"],
        None,
        "error",
        False,
    ),
    "plan hf_config": (
        ".json",
        ["plan", "{good}", "--top", "1"],
        SCENARIO.replace("layers = 8\n", 'hf_config = "{bad}"\n'),
        "error",
        False,
    ),
}


def _make(kind: str, path: pathlib.Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "not-utf8":
        path.write_bytes(b'# caf\xe9\nname = "\xff\xfe"\n')
    else:
        with open(path, "wb") as fh:
            fh.truncate(OVERSIZE)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SHARDMETER_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _run(argv: list[str], cwd: pathlib.Path, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, "-m", "shardmeter", *argv],
            cwd=cwd,
            env=_env(),
            stdin=stdin,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"shardmeter {' '.join(argv)} did not end in 60 s (blocked on its input?)")


def _case(name: str, kind: str, tmp: pathlib.Path):
    suffix, argv, text, bad_file, folder_input = SURFACES[name]
    work = tmp / f"{kind}-{name.replace(' ', '_').replace('=', '').replace('-', '')}"
    work.mkdir()
    bad = work / f"{BAD}{suffix}"
    if kind == "directory" and folder_input:
        bad.mkdir()  # a folder of inputs, holding one that must not be opened
        os.mkfifo(bad / f"{BAD}-inside.toml")
        expect = "case"
    else:
        _make(kind, bad)
        expect = bad_file if kind != "fifo" else "error"
    good = work / "good.toml"
    good.write_text((text or SCENARIO).replace("{bad}", str(bad)), encoding="utf-8")
    out = work / "out"
    args = [a.format(bad=bad, good=good, out=out) for a in argv]
    return args, work, expect


class _Runs(dict):
    """Every surface of one kind run once, two at a time, when a test first asks for that kind
    (the default run asks for FIFOs only; the other kinds are in CI's slow stage)."""

    def __init__(self, tmp):
        super().__init__()
        self.tmp = tmp

    def __missing__(self, key):
        kind = key[1]
        cases = {(n, kind): _case(n, kind, self.tmp) for n in SURFACES}
        with ThreadPoolExecutor(2) as pool:
            done = dict(zip(cases, pool.map(lambda c: _run(c[0], c[1]), cases.values()), strict=True))
        self.update({k: (cases[k], done[k]) for k in cases})
        return self[key]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _Runs(tmp_path_factory.mktemp("surfaces"))


#: A FIFO is the kind that would block a reader; the directory, non-UTF-8 and oversize cases of
#: every surface run in CI's slow stage.
_KIND_PARAMS = [k if k == "fifo" else pytest.param(k, marks=pytest.mark.slow) for k in KINDS]


@pytest.mark.parametrize("kind", _KIND_PARAMS)
@pytest.mark.parametrize("surface", list(SURFACES))
def test_a_file_that_is_not_readable_text_is_one_line_naming_it(results, surface, kind):
    (args, work, expect), proc = results[(surface, kind)]
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    if expect == "error":
        assert proc.returncode == 2, (args, proc.returncode, proc.stdout[-500:], err[-500:])
        assert len(err.splitlines()) == 1, err
        assert BAD in err, err
        assert proc.stdout == "", proc.stdout[-500:]
    else:  # a failed validation case, listed with the file's name and why
        shown = proc.stdout.splitlines() + err.splitlines()
        page = work / "out.html"
        if page.exists():  # report --validation lists its failed cases on the page
            shown += page.read_text(encoding="utf-8").replace("<tr", "\n<tr").splitlines()
        failed = [ln for ln in shown if BAD in ln]
        assert failed, (proc.returncode, proc.stdout[-1500:], err[-500:])
        why = {"fifo": "FIFO", "directory": "FIFO", "not-utf8": "UTF-8", "oversize": "bytes"}[kind]
        assert any(why in ln for ln in failed), failed


@pytest.mark.parametrize(
    ("kind", "why"), [("not-utf8", "not a UTF-8 text file"), ("oversize", "is more than")]
)
def test_standard_input_is_held_to_the_same_rules(tmp_path, kind, why):
    src = tmp_path / "stdin"
    _make(kind, src)
    with open(src, "rb") as fh:
        proc = _run(["estimate", "-"], tmp_path, stdin=fh)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1 and "<stdin>" in err and why in err, err


# --- no module opens an input file but the reader ----------------------------------------------

#: Modules allowed to open files: the reader, the atomic writer, and what reads files it owns
#: (its bundled data through importlib.resources, a ``--resume`` CSV it wrote itself).
OPENERS = {
    "shardmeter/reading.py": "the one reader",
    "shardmeter/io.py": "the atomic writer (os.open of its temporary file)",
}

#: Calls that read a file: open(), os.open/fdopen, Path.open/read_text/read_bytes, tomllib.load,
#: json.load, numpy's loaders.
_READ_ATTRS = {"read_text", "read_bytes", "open", "fdopen", "load", "loadtxt", "genfromtxt", "fromfile"}


def _bundled(node: ast.Call) -> bool:
    """``resources.files(...).joinpath(...).read_text(...)``: a file shipped inside the package."""
    f = node.func
    return isinstance(f, ast.Attribute) and "resources.files" in ast.unparse(f.value)


def _reads(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            found.append((node.lineno, "open()"))
        elif isinstance(f, ast.Attribute) and f.attr in _READ_ATTRS and not _bundled(node):
            base = ast.unparse(f.value)
            if f.attr == "load" and base not in ("tomllib", "json", "np", "numpy", "pickle", "marshal"):
                continue
            if f.attr == "open" and base == "os" and "O_WRONLY" in ast.unparse(node):
                continue  # a file created for writing, not an input
            found.append((node.lineno, f"{base}.{f.attr}()"))
    return found


def test_no_module_but_the_reader_opens_an_input_file():
    """Every input goes through :func:`shardmeter.reading.read_input` (or its bytes form): a
    module that calls ``open()``, ``read_text()``, ``read_bytes()``, ``tomllib.load`` or
    ``json.load`` itself would skip the checks on FIFOs, size and encoding."""
    offenders = []
    for path in sorted((ROOT / "shardmeter").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in OPENERS:
            continue
        for line, call in _reads(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{rel}:{line}: {call}")
    assert offenders == [], "\n".join(offenders)


def test_the_static_check_finds_an_open_call():
    """The check above can fail: it sees each way of opening a file."""
    src = "open(p)\npathlib.Path(p).read_text()\nx.read_bytes()\ntomllib.load(fh)\njson.load(fh)\n"
    assert [c for _, c in _reads(ast.parse(src))] == [
        "open()",
        "pathlib.Path(p).read_text()",
        "x.read_bytes()",
        "tomllib.load()",
        "json.load()",
    ]
    assert _reads(ast.parse("resources.files('shardmeter').joinpath('x').read_text()")) == []
    assert _reads(ast.parse("os.open(p, os.O_CREAT | os.O_WRONLY)")) == []
    assert _reads(ast.parse("os.open(p, os.O_RDONLY)")) == [(1, "os.open()")]

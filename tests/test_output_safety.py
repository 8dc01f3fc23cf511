"""Outputs never destroy anything: ``atomic_write`` refuses special files (a FIFO in the test's
folder stands for ``/dev/null`` and the other devices: no test writes to a real device or a
system path), follows a symlink to a regular file, keeps the old file's mode or gives a new one
the umask's; ``sweep --csv``/``--plot`` refuse to overwrite the scenario file; a damaged
``--resume`` CSV is one line naming the file, the line and the column; an interrupted sweep says
what is really in its output; every error names the user's path, never the temporary file."""

from __future__ import annotations

import csv
import errno
import os
import shutil
import stat
import subprocess
import sys

import pytest
from cli_helpers import run

from shardmeter.errors import ShardMeterError
from shardmeter.io import atomic_write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALE = os.path.join(ROOT, "examples", "studies", "scale-nodes.toml")
VARY = ["--vary", "island[0].nodes=8,16"]

posix = pytest.mark.skipif(os.name != "posix", reason="FIFOs, symlinks and modes are POSIX")


def one_error(code: int, err: str, *expect: str) -> str:
    """Exit 2, one line on stderr, no traceback, naming every ``expect`` and no temporary file."""
    assert "Traceback" not in err, err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("shardmeter: error: "), line
    for e in expect:
        assert e in line, f"{e!r} not in {line!r}"
    assert ".tmp" not in line, line
    return line


def no_debris(folder) -> None:
    assert [p for p in os.listdir(folder) if p.endswith(".tmp")] == []


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "scenario.toml"
    shutil.copyfile(SCALE, path)
    return path


@pytest.fixture
def umask():
    """Set the umask for one test; the old one is restored after."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


# -- special files are refused, never replaced -----------------------------------------------


@posix
def test_a_fifo_target_is_refused_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ShardMeterError) as ei, atomic_write(fifo) as fh:
        fh.write("x")
    assert "FIFO" in str(ei.value) and str(fifo) in str(ei.value) and ".tmp" not in str(ei.value)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    no_debris(tmp_path)


@posix
def test_sweep_csv_to_a_fifo_is_one_line_and_the_fifo_stays(tmp_path, scenario, capsys):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    one_error(*run(capsys, "sweep", scenario, *VARY, "--csv", fifo)[::2], "--csv", str(fifo), "FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    no_debris(tmp_path)


@posix
def test_resume_from_a_fifo_is_refused_without_blocking(tmp_path, scenario):
    """``--resume`` used to open() the FIFO and wait forever for a writer."""
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    argv = ["sweep", str(scenario), *VARY, "--csv", str(fifo), "--resume"]
    res = subprocess.run(
        [sys.executable, "-m", "shardmeter", *argv], capture_output=True, text=True, timeout=60, check=False
    )
    one_error(res.returncode, res.stderr, str(fifo), "FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_directory_target_is_refused(tmp_path):
    folder = tmp_path / "out.csv"
    folder.mkdir()
    with pytest.raises(ShardMeterError) as ei, atomic_write(folder) as fh:
        fh.write("x")
    assert "directory" in str(ei.value) and str(folder) in str(ei.value) and ".tmp" not in str(ei.value)
    assert folder.is_dir() and list(folder.iterdir()) == []
    no_debris(tmp_path)


# -- symlinks: followed to a regular file, refused otherwise ---------------------------------


@posix
def test_a_symlink_to_a_regular_file_is_followed_and_stays_a_link(tmp_path, capsys, scenario):
    real = tmp_path / "data" / "real.csv"
    real.parent.mkdir()
    real.write_text("old\n")
    os.chmod(real, 0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    with atomic_write(link) as fh:
        fh.write("new\n")
    assert os.path.islink(link) and os.readlink(link) == str(real)
    assert real.read_text() == "new\n"
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o640
    # through the CLI too
    code, _, err = run(capsys, "sweep", scenario, *VARY, "--csv", link)
    assert code == 0, err
    assert os.path.islink(link)
    assert real.read_text().startswith("island[0].nodes,feasible,")
    no_debris(tmp_path)
    no_debris(real.parent)


@posix
@pytest.mark.parametrize("what", ["fifo", "dangling", "loop", "directory"])
def test_a_symlink_to_anything_but_a_regular_file_is_refused(what, tmp_path):
    link = tmp_path / "link.csv"
    pointee = tmp_path / "pointee"
    if what == "fifo":
        os.mkfifo(pointee)
    elif what == "directory":
        pointee.mkdir()
    elif what == "loop":
        pointee.symlink_to(link)
    link.symlink_to(pointee)
    with pytest.raises(ShardMeterError) as ei, atomic_write(link) as fh:
        fh.write("x")
    assert str(link) in str(ei.value) and ".tmp" not in str(ei.value)
    assert os.path.islink(link) and os.readlink(link) == str(pointee)
    if what == "fifo":
        assert stat.S_ISFIFO(os.lstat(pointee).st_mode)
    if what == "dangling":
        assert not os.path.lexists(pointee)
    no_debris(tmp_path)


# -- modes: the old file's, or the umask's -----------------------------------------------------


@posix
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_a_new_file_gets_the_mode_the_umask_gives(mask, tmp_path, umask):
    umask(mask)
    target = tmp_path / "new.csv"
    with atomic_write(target) as fh:
        fh.write("a\n")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o666 & ~mask


@posix
@pytest.mark.parametrize("mode", [0o640, 0o644, 0o600, 0o664])
def test_an_existing_file_keeps_its_mode(mode, tmp_path, umask):
    umask(0o077)
    target = tmp_path / "old.csv"
    target.write_text("old\n")
    os.chmod(target, mode)
    with atomic_write(target, "wb") as fh:
        fh.write(b"new\n")
    assert target.read_bytes() == b"new\n"
    assert stat.S_IMODE(os.stat(target).st_mode) == mode


@posix
def test_sweep_csv_modes(tmp_path, scenario, capsys, umask):
    umask(0o022)
    new = tmp_path / "new.csv"
    assert run(capsys, "sweep", scenario, *VARY, "--csv", new)[0] == 0
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o644
    os.chmod(new, 0o640)
    assert run(capsys, "sweep", scenario, *VARY, "--csv", new, "--resume")[0] == 0
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o640


# -- an output is never an input -------------------------------------------------------------


@pytest.mark.parametrize("how", ["same", "spelling", "symlink", "hardlink"])
@pytest.mark.parametrize("option", ["--csv", "--plot"])
def test_an_output_over_the_scenario_file_is_refused(option, how, tmp_path, scenario, capsys):
    before = scenario.read_bytes()
    if how == "same":
        out = str(scenario)
    elif how == "spelling":
        (tmp_path / "sub").mkdir()
        out = str(tmp_path / "sub" / ".." / scenario.name)
    elif how == "symlink":
        if os.name != "posix":
            pytest.skip("symlinks")
        out = str(tmp_path / "alias.csv")
        os.symlink(scenario, out)
    else:
        out = str(tmp_path / "hard.csv")
        os.link(scenario, out)
    code, stdout, err = run(capsys, "sweep", scenario, *VARY, option, out)
    one_error(code, err, f"{option} {out}: is one of the command's inputs; refusing to overwrite an input")
    assert stdout == ""
    assert scenario.read_bytes() == before
    no_debris(tmp_path)


def test_csv_and_plot_naming_one_file_is_refused(tmp_path, scenario, capsys):
    out = tmp_path / "both"
    code, _, err = run(capsys, "sweep", scenario, *VARY, "--csv", out, "--plot", out)
    one_error(code, err, f"--plot {out}", "--csv")
    assert not out.exists()


# -- a damaged --resume CSV ------------------------------------------------------------------


def _damage(rows: list[list[str]], how: str, path) -> tuple[str, str | None]:
    """Damage the CSV ``rows`` the way ``how`` says; write them to ``path``; returns the line
    and the column (or None) the error must name."""
    header = rows[0]
    if how == "text in a number":
        rows[2][header.index("tokens_per_s")] = "lots"
        col = "tokens_per_s"
    elif how == "truncated row":
        rows[2] = rows[2][:7]
        col = None
    elif how == "extra column":
        rows[2] = [*rows[2], "surplus"]
        col = None
    elif how == "feasible":
        rows[2][header.index("feasible")] = "maybe"
        col = "feasible"
    elif how == "gpus":
        rows[2][header.index("gpus")] = "0"
        col = "gpus"
    if how == "not utf-8":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            csv.writer(fh, lineterminator="\n").writerows(rows)
        data = path.read_bytes().split(b"\n")
        data[2] = data[2].replace(b"compute-bound", b"compute\xff\xfebound")
        path.write_bytes(b"\n".join(data))
        return "line 3", "regime"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    return "line 3", col


@pytest.mark.parametrize(
    "how", ["text in a number", "truncated row", "extra column", "not utf-8", "feasible", "gpus"]
)
def test_a_damaged_resume_csv_is_one_line_naming_file_line_and_column(how, tmp_path, scenario, capsys):
    out = tmp_path / "s.csv"
    assert run(capsys, "sweep", scenario, *VARY, "--csv", out)[0] == 0
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    line, col = _damage(rows, how, out)
    damaged = out.read_bytes()
    code, stdout, err = run(
        capsys, "sweep", scenario, "--vary", "island[0].nodes=8..32x2", "--csv", out, "--resume"
    )
    msg = one_error(code, err, "--resume", str(out), line, *([col] if col else []))
    assert stdout == ""
    assert "column" in msg or col is None
    assert out.read_bytes() == damaged  # the file is left as it was, for the user to mend


def test_a_resume_csv_with_missing_columns_is_refused(tmp_path, scenario, capsys):
    out = tmp_path / "s.csv"
    assert run(capsys, "sweep", scenario, *VARY, "--csv", out)[0] == 0
    with open(out, newline="", encoding="utf-8") as fh:
        rows = [r[:-3] for r in csv.reader(fh)]
    with open(out, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    code, _, err = run(capsys, "sweep", scenario, *VARY, "--csv", out, "--resume")
    one_error(code, err, "--resume", str(out), "line 1", "missing")


# -- errors name the user's path, never the temporary file ---------------------------------


def test_a_missing_folder_names_the_users_path(tmp_path, scenario, capsys):
    target = tmp_path / "no" / "such" / "out.csv"
    with pytest.raises(OSError) as ei, atomic_write(target) as fh:
        fh.write("x")
    assert str(target) in str(ei.value) and ".tmp" not in str(ei.value)
    assert ei.value.filename == str(target) and ei.value.errno == errno.ENOENT
    from shardmeter.io import check_output

    with pytest.raises(OSError) as ei:
        check_output(target, label="--csv")
    assert ei.value.filename == str(target) and str(ei.value).startswith(f"--csv {target}: ")
    one_error(
        *run(capsys, "sweep", scenario, *VARY, "--csv", target)[::2], f"--csv {target}", "does not exist"
    )


def test_a_full_disk_names_the_users_path(tmp_path, scenario, capsys, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    target = tmp_path / "out.csv"
    target.write_text("old\n")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as ei, atomic_write(target) as fh:
        fh.write("new\n")
    assert str(target) in str(ei.value) and ".tmp" not in str(ei.value)
    assert ei.value.errno == errno.ENOSPC
    assert target.read_text() == "old\n"
    no_debris(tmp_path)
    one_error(*run(capsys, "sweep", scenario, *VARY, "--csv", target)[::2], str(target), "No space left")
    assert target.read_text() == "old\n"
    no_debris(tmp_path)


@posix
@pytest.mark.skipif(os.name == "posix" and os.geteuid() == 0, reason="root writes anywhere")
def test_a_folder_that_cannot_be_written_names_the_users_path(tmp_path, scenario, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    os.chmod(folder, 0o555)
    try:
        target = folder / "out.csv"
        with pytest.raises(OSError) as ei, atomic_write(target) as fh:
            fh.write("x")
        assert str(target) in str(ei.value) and ".tmp" not in str(ei.value)
        one_error(*run(capsys, "sweep", scenario, *VARY, "--csv", target)[::2], str(target), "Permission")
    finally:
        os.chmod(folder, 0o755)


@posix
@pytest.mark.skipif(os.name == "posix" and os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_file_is_not_replaced(tmp_path):
    target = tmp_path / "keep.csv"
    target.write_text("precious\n")
    os.chmod(target, 0o444)
    with pytest.raises(OSError) as ei, atomic_write(target) as fh:
        fh.write("x")
    assert str(target) in str(ei.value) and ei.value.errno == errno.EACCES
    assert target.read_text() == "precious\n"


# -- an interrupted sweep says what is really in its output ----------------------------------


def _interrupt_at_once(monkeypatch):
    import shardmeter.explore.search.sweep as sw

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(sw, "run_sweep", interrupted)


def test_an_interrupt_before_the_first_save_does_not_claim_partial_results(
    tmp_path, scenario, capsys, monkeypatch
):
    _interrupt_at_once(monkeypatch)
    out = tmp_path / "out.csv"
    code, _, err = run(capsys, "sweep", scenario, *VARY, "--csv", out)
    assert code == 130
    assert "rows done so far are in" not in err and "was not written" in err
    assert not out.exists()


def test_an_interrupt_before_a_resumed_sweep_saves_says_the_file_is_unchanged(
    tmp_path, scenario, capsys, monkeypatch
):
    out = tmp_path / "out.csv"
    assert run(capsys, "sweep", scenario, *VARY, "--csv", out)[0] == 0
    before = out.read_bytes()
    _interrupt_at_once(monkeypatch)
    code, _, err = run(
        capsys, "sweep", scenario, "--vary", "island[0].nodes=8..32x2", "--csv", out, "--resume"
    )
    assert code == 130
    assert f"{out} is unchanged (2 rows)" in err and "rows done so far" not in err
    assert out.read_bytes() == before


def test_an_output_folder_that_does_not_exist_fails_before_the_sweep(tmp_path, scenario, capsys, monkeypatch):
    _interrupt_at_once(monkeypatch)  # had the sweep started, it would be "interrupted"
    out = tmp_path / "gone" / "out.csv"
    code, _, err = run(capsys, "sweep", scenario, *VARY, "--csv", out)
    one_error(code, err, f"--csv {out}", "does not exist")
    assert "rows done so far" not in err and "interrupted" not in err

"""shardmeter calibrate against hostile and broken inputs, one test per class of defect
(issue "Reliability, round three"): inputs only through the one reader (no FIFO blocks it, a
size limit, UTF-8), numbers only through the one check (ASCII digits, finite), every bad row one
line naming file:line (or skipped with a counted warning where nccl-tests users expect it), no
implausible fit silently written, strict JSON, bounded work, file text escaped for the terminal.
Each test goes through the command or its public functions, so it says the same of any version."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import threading

import numpy as np
import pytest

from shardmeter.calibrate import cli as cal_cli
from shardmeter.calibrate import nccl_log

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_calibrate import H100, NVLINK4, _cli, _tiers, _write, gemm_csv
from test_calibrate import nccl_log as make_log

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _calibrate(tmp_path, *inputs: str, extra=("--gpu", "h100-sxm")) -> tuple[int, str]:
    return _cli(["calibrate", *inputs, *extra, "--out", str(tmp_path / "cal.toml")]), str(
        tmp_path / "cal.toml"
    )


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("shardmeter: error: "), err
    assert "Traceback" not in err[0]
    return err[0]


def _rows(text: str) -> list[int]:
    """Indexes of the result rows of a generated log."""
    return [i for i, ln in enumerate(text.splitlines()) if ln[:12].strip().isdigit()]


# -- the one reader --------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("name", ["all_reduce_perf.log", "gemm.csv"])
def test_a_fifo_is_refused_without_blocking(tmp_path, capsys, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    result: list[int] = []
    th = threading.Thread(target=lambda: result.append(_calibrate(tmp_path, str(fifo))[0]), daemon=True)
    th.start()
    th.join(20)
    if th.is_alive():  # the old reader blocks in open(): let it go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        th.join(5)
        pytest.fail("calibrate blocked on a FIFO")
    assert result == [2]
    assert "is not a regular file (a FIFO)" in _one_error(capsys)


def test_a_log_over_the_size_limit_is_refused_by_name(tmp_path, capsys):
    text = make_log("all_reduce", nodes=1, gpn=8, tiers=_tiers())
    pad = "# " + "x" * 1022 + "\n"
    path = _write(tmp_path / "all_reduce.log", text + pad * (nccl_log.MAX_LOG_BYTES // len(pad) + 1))
    assert _calibrate(tmp_path, path)[0] == 2
    assert f"a nccl-tests log is at most {nccl_log.MAX_LOG_BYTES:,}" in _one_error(capsys)


def test_a_utf16_log_is_named_as_such(tmp_path, capsys):
    path = tmp_path / "all_reduce.log"
    path.write_text(make_log("all_reduce", nodes=1, gpn=8, tiers=_tiers()), encoding="utf-16")
    assert _calibrate(tmp_path, str(path))[0] == 2
    assert _one_error(capsys).endswith("all_reduce.log: UTF-16 text: save the file as UTF-8")


# -- the one number check, one line per bad row ----------------------------------------------------


def test_non_ascii_digits_in_a_time_are_refused(tmp_path, capsys):
    """float() reads Arabic-Indic digits; a log's time must be ASCII."""
    lines = make_log("all_reduce", nodes=1, gpn=8, tiers=_tiers()).splitlines()
    i = _rows("\n".join(lines))[10]
    toks = lines[i].split()
    lines[i] = lines[i].replace(f" {toks[5]} ", " \u0664\u0662.\u0661\u0665 ", 1)
    path = _write(tmp_path / "all_reduce.log", "\n".join(lines) + "\n")
    assert _calibrate(tmp_path, path)[0] == 2
    assert _one_error(capsys).startswith(
        f"shardmeter: error: {path}:{i + 1}: time (column 6): expected a number"
    )


def test_a_superscript_size_is_one_line_not_a_traceback(tmp_path, capsys):
    """'8²'.isdigit() is True and int('8²') raises: the old reader died with a traceback."""
    lines = make_log("all_reduce", nodes=1, gpn=8, tiers=_tiers()).splitlines()
    i = _rows("\n".join(lines))[3]
    lines[i] = lines[i].replace(lines[i].split()[0], lines[i].split()[0][:-1] + "\u00b2", 1)
    path = _write(tmp_path / "all_reduce.log", "\n".join(lines) + "\n")
    assert _calibrate(tmp_path, path)[0] == 2
    assert _one_error(capsys).startswith(f"shardmeter: error: {path}:{i + 1}: size (column 1): ")


def test_a_superscript_gemm_dimension_is_one_line_not_a_traceback(tmp_path, capsys):
    path = _write(
        tmp_path / "g.csv", "m,n,k,dtype,seconds\n1024,1024,1024,bf16,1e-4\n4096,\u00b2,4096,bf16,1e-3\n"
    )
    assert _calibrate(tmp_path, path)[0] == 2
    assert _one_error(capsys).startswith(f"shardmeter: error: {path}:3: $.n: ")


def test_rows_cut_short_and_wrong_results_are_skipped_with_a_counted_warning(tmp_path, capsys):
    """NCCL_DEBUG=INFO lines split rows; a row with #wrong > 0 measured a broken collective.
    nccl-tests users expect both left out, said once, not the whole log refused."""
    lines = make_log("all_reduce", nodes=1, gpn=8, tiers=_tiers()).splitlines()
    rows = _rows("\n".join(lines))
    cut, wrong = rows[5], rows[7]
    lines[cut] = lines[cut][:70]
    toks = lines[wrong].split()
    lines[wrong] = lines[wrong].replace(f"  {toks[8]}  ", "  1234  ", 1)
    path = _write(tmp_path / "all_reduce.log", "\n".join(lines) + "\n")
    rc, _ = _calibrate(tmp_path, path)
    out = capsys.readouterr().err
    assert rc == 0
    assert f"warning: {path}:1: 1 rows cut short by interleaved output left out (lines {cut + 1})" in out
    assert f"warning: {path}:1: 1 rows with #wrong > 0 left out (lines {wrong + 1})" in out


# -- no implausible fit becomes an overlay ---------------------------------------------------------


def test_a_ring_faster_than_the_wire_is_refused_with_its_figures(tmp_path, capsys):
    fast = [(NVLINK4.bandwidth_gb_s * 1e9 * 1.2, 3e-6), (1.0, 1.0)]
    path = _write(tmp_path / "ag.log", make_log("all_gather", nodes=1, gpn=8, tiers=fast, noise=0.0))
    rc, out = _calibrate(tmp_path, path)
    err = _one_error(capsys)
    assert rc == 2 and not pathlib.Path(out).exists()
    assert "all_gather on link 'nvlink4': 540 GB/s per GPU is 1.20 x the link's wire rate 450 GB/s" in err


def test_a_gemm_fit_held_at_the_peak_is_refused(tmp_path, capsys):
    """Timings faster than the model at 100 % of the dense peak (a wrong --gpu): the bounded
    search stops at 1.0, which the old command wrote as matmul_efficiency = 1.0."""
    path = _write(tmp_path / "g.csv", gemm_csv(H100, {"bf16": 1.4}, noise=0.0))
    rc, out = _calibrate(tmp_path, path)
    err = _one_error(capsys)
    assert rc == 2 and not pathlib.Path(out).exists()
    assert "matmul_efficiency of 'h100-sxm' fits at the search bound 1 (of [0.01, 1])" in err


def test_a_huge_residual_is_refused(tmp_path, capsys):
    lines = make_log("all_reduce", nodes=1, gpn=8, tiers=_tiers(), noise=0.0).splitlines()
    rng = np.random.default_rng(0)
    for i in _rows("\n".join(lines)):
        toks = lines[i].split()
        lines[i] = lines[i].replace(f" {toks[5]} ", f" {float(toks[5]) * rng.uniform(0.3, 3.0):7.2f} ", 1)
    path = _write(tmp_path / "ar.log", "\n".join(lines) + "\n")
    rc, out = _calibrate(tmp_path, path)
    err = _one_error(capsys)
    assert rc == 2 and not pathlib.Path(out).exists()
    assert "leave a mean |error| of" in err and "(at most 25%): not written" in err


def test_a_gemm_faster_than_the_peak_is_refused_by_line(tmp_path, capsys):
    """One GEMM of a sweep timed at half its time: 2 m n k / s above the dense bf16 peak,
    which no kernel reaches, while the others keep the fit inside its bounds (the old command
    wrote the fit)."""
    lines = gemm_csv(H100, {"bf16": 0.7}, noise=0.0).splitlines()
    m, n, k, dt, sec = lines[-1].split(",")
    lines[-1] = ",".join([m, n, k, dt, f"{float(sec) / 2:.6e}"])
    path = _write(tmp_path / "g.csv", "\n".join(lines) + "\n")
    rc, out = _calibrate(tmp_path, path)
    err = _one_error(capsys)
    assert rc == 2 and not pathlib.Path(out).exists()
    assert (
        f"{path}:{len(lines)}: 1 of " in err
        and "GEMMs run faster than the bf16 peak of 'h100-sxm' (989" in err
    )
    assert f"{m}x{n}x{k} in " in err and " x the peak; not written" in err


def test_a_gemm_fit_with_a_huge_residual_is_refused(tmp_path, capsys):
    """Times 1 to 4 x the model's at one efficiency, at random: no efficiency explains them."""
    rng = np.random.default_rng(1)
    lines = gemm_csv(H100, {"bf16": 0.7}, noise=0.0).splitlines()
    for i in range(1, len(lines)):
        *head, sec = lines[i].split(",")
        lines[i] = ",".join([*head, f"{float(sec) * rng.uniform(1.0, 4.0):.6e}"])
    path = _write(tmp_path / "g.csv", "\n".join(lines) + "\n")
    rc, out = _calibrate(tmp_path, path)
    err = _one_error(capsys)
    assert rc == 2 and not pathlib.Path(out).exists()
    assert "matmul_efficiency of 'h100-sxm' = " in err and "(at most 25%): not written" in err


def test_measured_steps_that_no_efficiency_explains_are_refused(tmp_path, capsys):
    """One run measured three times at half, once and twice the model's figure: the fit keeps
    the catalog's efficiencies and leaves a mean error near 50 % (the old command wrote it)."""
    from test_calibrate import _step_scenario, _toml

    import shardmeter

    tps = shardmeter.estimate(_step_scenario(2048, 32)).tokens_per_s_per_gpu
    files = [
        _write(tmp_path / f"run{i}.toml", _toml(_step_scenario(2048, 32, tps * f)))
        for i, f in enumerate((0.5, 1.0, 2.0))
    ]
    rc, out = _calibrate(tmp_path, *files, extra=())
    err = _one_error(capsys)
    assert rc == 2 and not pathlib.Path(out).exists()
    assert "the measured steps fit with h100-sxm matmul_efficiency = " in err
    assert "over 3 measured fields (at most 25%): not written" in err


def test_a_fit_with_a_middling_residual_is_written_and_flagged(tmp_path, capsys):
    """20 % noise on every time: written (exit 0), with its figures on stderr -- not stdout,
    not --json -- and ``flagged`` in the entry's source."""
    path = _write(
        tmp_path / "ar.log", make_log("all_reduce", nodes=1, gpn=8, tiers=_tiers(), noise=0.2, seed=3)
    )
    rc, out = _calibrate(tmp_path, path, "--json")
    printed = capsys.readouterr()
    assert rc == 0
    json.loads(printed.out)  # one document, the warning not in it
    (warn,) = [ln for ln in printed.err.splitlines() if "flagged" in ln]
    assert (
        warn.startswith("warning: link nvlink4: mean |error| ")
        and " rows, above 10%: written, flagged" in warn
    )
    (link,) = tomllib.loads(pathlib.Path(out).read_text(encoding="utf-8"))["link"]
    assert "flagged: mean |error| " in link["source"]


def test_a_latency_the_logs_cannot_determine_is_not_written(tmp_path, capsys):
    """Only sizes from 64 MB, timed a touch under S / B: the least squares wants a negative
    latency and holds it at 0; the old command wrote latency_us = 0."""
    lines = make_log("all_reduce", nodes=1, gpn=8, tiers=[(369e9, 0.0), (1.0, 1.0)], noise=0.0).splitlines()
    keep = []
    for i, ln in enumerate(lines):
        if i in _rows("\n".join(lines)):
            toks = ln.split()
            if int(toks[0]) < 64 * 2**20:
                continue
            ln = ln.replace(f" {toks[5]} ", f" {float(toks[5]) - 20.0:7.1f} ", 1)
        keep.append(ln)
    path = _write(tmp_path / "ar.log", "\n".join(keep) + "\n")
    rc, out = _calibrate(tmp_path, path)
    printed = capsys.readouterr().err
    assert rc == 0
    assert "warning: link nvlink4: the logs do not determine a latency" in printed
    (link,) = tomllib.loads(pathlib.Path(out).read_text(encoding="utf-8"))["link"]
    assert "latency_us" not in link and 0.75 < link["efficiency"] < 0.9


# -- strict JSON, bounded work, escaped text -------------------------------------------------------


def test_json_never_prints_nan_or_infinity(tmp_path, capsys, monkeypatch):
    def fake(*_a, **_k):
        return {"lines": ["x"], "steps": {"error_before": float("nan"), "cases": [{"before": float("inf")}]}}

    monkeypatch.setattr(cal_cli, "run_calibrate", fake)
    rc = _cli(["calibrate", "x.log", "--out", str(tmp_path / "o.toml"), "--json"])
    out = capsys.readouterr().out

    def refuse(tok):
        raise AssertionError(f"non-strict JSON constant {tok}")

    doc = json.loads(out, parse_constant=refuse)
    assert rc == 0 and doc["steps"]["error_before"] is None and doc["steps"]["cases"] == [{"before": None}]


def test_result_rows_are_bounded(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(nccl_log, "MAX_ROWS", 10, raising=False)
    path = _write(tmp_path / "ar.log", make_log("all_reduce", nodes=1, gpn=8, tiers=_tiers()))
    assert _calibrate(tmp_path, path)[0] == 2
    assert "more than 10 result rows in one file" in _one_error(capsys)


def test_escape_sequences_from_a_log_do_not_reach_the_terminal(tmp_path, capsys):
    text = make_log("all_reduce", nodes=1, gpn=8, tiers=_tiers())
    text = text.replace(
        "# Collective test starting: all_reduce_perf", "# Collective test starting: \x1b]0;pwned\x07x"
    )
    path = _write(tmp_path / "ar.log", text)
    assert _calibrate(tmp_path, path)[0] == 2
    err = _one_error(capsys)
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;pwned\\x07x" in err

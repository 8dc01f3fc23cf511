"""shardmeter calibrate: synthetic nccl-tests logs and GEMM CSVs in the real formats, made from
known figures by the model's own formulas, are recovered within 5 %; the overlay loads into a
scenario through ``catalog`` and moves its prediction; fitting one bundled source's runs lowers
that source's error; bad input is a one-line error naming file, line and field.

The generators (also what wrote examples/calibration/, see :func:`write_examples`):

* nccl-tests logs in the layout NVIDIA/nccl-tests ``src/util.cu`` prints (header, ``# Using
  devices``, the results table at its printf widths, the footer), times from
  ``shardmeter.model.tiers.collective_time`` over a node's tier and its network's;
* GEMM CSVs ``m,n,k,dtype,seconds`` timed by ``shardmeter.model.formulas.gemm_time``;

times multiplied by ``1 + noise x N(0, 1)`` from a fixed seed.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import types

import numpy as np
import pytest

import shardmeter
from shardmeter.calibrate import cli as cal_cli
from shardmeter.calibrate.gemm import GemmRow, fit_gemm, model_times, read_gemm_csv
from shardmeter.calibrate.nccl import fit_tier, read_nccl_logs
from shardmeter.calibrate.steps import fit_steps
from shardmeter.errors import ScenarioError
from shardmeter.model.tiers import collective_time
from shardmeter.registry.manager import get_registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "calibration"
PUBLISHED = ROOT / "shardmeter" / "validation_data" / "published"

BINARY = {
    "all_reduce": "all_reduce_perf",
    "all_gather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
    "all_to_all": "alltoall_perf",
}


def _f(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: %.2f, else %.1f, %.0f, else an exponent, within ``width``."""
    for fmt in (f"{value:{width}.2f}", f"{value:{width}.1f}", f"{value:{width}.0f}"):
        if len(fmt) <= width:
            return fmt
    return f"{value:{width}.1e}"


def collective_seconds(kind: str, size: np.ndarray, ranks: int, gpn: int, tiers) -> np.ndarray:
    """The model's time of one collective over ``ranks`` GPUs, ``gpn`` per node; ``tiers`` =
    ``[(bytes/s, latency s) intra, (bytes/s, latency s) inter]``."""
    topo = types.SimpleNamespace(
        tier_gpus=np.array([float(gpn), np.inf]),
        tier_bytes_s=np.array([tiers[0][0], tiers[1][0]]),
        tier_latency_s=np.array([tiers[0][1], tiers[1][1]]),
    )
    return np.array([float(collective_time(kind, float(s), ranks, 1, topo)) for s in size])


def nccl_log(
    kind: str,
    *,
    nodes: int,
    gpn: int,
    tiers,
    noise: float = 0.01,
    seed: int = 0,
    started_line: bool = True,
    per_iter: bool = False,
    device: str = "NVIDIA H100 80GB HBM3",
    dtype: str = "float",
) -> str:
    """One nccl-tests log (8 B to 8 GiB, factor 2), one process per node with ``gpn`` GPUs;
    ``count`` as nccl-tests prints it: the elements of S (all-reduce) or of one rank's share
    (all-gather, reduce-scatter, all-to-all), of ``dtype``."""
    rng = np.random.default_rng(seed)
    ranks = nodes * gpn
    sizes = np.array([8 * 2**i for i in range(31)], dtype=float)
    sizes = sizes[sizes >= 4 * ranks] if kind in ("all_gather", "reduce_scatter", "all_to_all") else sizes
    t = collective_seconds(kind, sizes, ranks, gpn, tiers) * (1.0 + noise * rng.standard_normal(len(sizes)))
    t_in = t * (1.0 + noise * rng.standard_normal(len(sizes)))
    factor = {"all_reduce": 2.0 * (ranks - 1) / ranks}.get(kind, (ranks - 1) / ranks)
    redop = "sum" if kind in ("all_reduce", "reduce_scatter") else "none"
    b = BINARY[kind]
    out = ["# nccl-tests version 2.17.1 nccl-headers=22603 nccl-library=22603"] if started_line else []
    if started_line:
        out.append(f"# Collective test starting: {b}")
    out.append(
        f"# nThread 1 nGpus {gpn} minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0" + (" unalign: 0" if started_line else "")
    )
    out += ["#", "# Using devices"]
    for r in range(ranks):
        node, dev = divmod(r, gpn)
        group = "Group  0 " if started_line else ""
        out.append(
            f"#  Rank {r:2d} {group}Pid {1000 + node:6d} on {f'node-{node:02d}':>10s} device {dev:2d} "
            f"[0000:{0x18 + 0x10 * dev:02x}:00] {device}"
        )
    out.append("#")
    pi = ["i_min", "i_max", "i_p99", "i_cv%"] if per_iter else []
    head = ["time", "algbw", "busbw", "#wrong", *pi]
    out.append(
        f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}           out-of-place                       in-place          "
    )
    out.append(
        f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}"
        + "".join(f"  {h:>7s}" if i == 0 else f"  {h:>6s}" for i, h in enumerate(head)) * 2
    )
    elt = {"float": 4, "bfloat16": 2, "half": 2, "double": 8, "int8": 1}[dtype]
    per_rank = ranks if kind in ("all_gather", "reduce_scatter", "all_to_all") else 1
    for s, a, c in zip(sizes, t, t_in, strict=True):
        row = f"{int(s):12d}  {int(s) // elt // per_rank:12d}  {dtype:>8s}  {redop:>6s}  {-1:6d}"
        for tt in (a, c):
            us = tt * 1e6
            algbw = s / tt / 1e9
            row += f"  {_f(us, 7)}  {_f(algbw, 6)}  {_f(algbw * factor, 6)}  {0:6g}"
            if per_iter:
                row += f"  {_f(us, 7)}  {_f(us * 1.1, 7)}  {_f(us * 1.05, 7)}  {_f(1.0, 7)}"
        out.append(row)
    out += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {float(np.mean(sizes / t / 1e9 * factor)):g} ",
        "#",
    ]
    if started_line:
        out += [f"# Collective test concluded: {b}", "#"]
    return "\n".join(out) + "\n"


#: Transformer GEMM shapes (tokens x out x in) of 4k-8k hidden layers, as benchmarks/gemm_timing.py times.
SHAPES = [
    (m, n, k)
    for m in (1024, 4096, 16384)
    for n, k in ((12288, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (24576, 8192), (8192, 8192))
]


def gemm_csv(gpu, effs: dict[str, float], *, noise: float = 0.01, seed: int = 0) -> str:
    """A GEMM timing CSV of :data:`SHAPES` for each dtype in ``effs`` (efficiency by dtype)."""
    rng = np.random.default_rng(seed)
    lines = ["m,n,k,dtype,seconds"]
    for dtype, eff in effs.items():
        prec = "fp8" if dtype == "fp8" else dtype
        rows = [GemmRow(m=m, n=n, k=k, precision=prec, seconds=1.0, line=0) for m, n, k in SHAPES]
        t = model_times(gpu, rows, eff) * (1.0 + noise * rng.standard_normal(len(rows)))
        lines += [f"{r.m},{r.n},{r.k},{dtype},{s:.6e}" for r, s in zip(rows, t, strict=True)]
    return "\n".join(lines) + "\n"


#: The figures examples/calibration/ was made from (H100 SXM node, 8 x NDR per node).
EXAMPLE_INTRA = (450e9 * 0.78, 3.0e-6)  # nvlink4 at efficiency 0.78, 3 us
EXAMPLE_INTER = (50e9 * 0.90 * 8 / 8, 12.0e-6)  # ib-ndr at efficiency 0.90, 8 NICs / 8 GPUs, 12 us
EXAMPLE_GEMM = {"bf16": 0.74, "fp8": 0.62}


def write_examples(folder: pathlib.Path) -> None:  # pragma: no cover - run by hand
    from shardmeter.registry.manager import get_registry

    gpu = get_registry().get("hardware", "h100-sxm")
    tiers = [EXAMPLE_INTRA, EXAMPLE_INTER]
    for name, kind, nodes, seed in (
        ("all_reduce_perf_1node.txt", "all_reduce", 1, 1),
        ("all_gather_perf_1node.txt", "all_gather", 1, 2),
        ("all_reduce_perf_2nodes.txt", "all_reduce", 2, 3),
        ("alltoall_perf_2nodes.txt", "all_to_all", 2, 4),
    ):
        (folder / name).write_text(
            nccl_log(kind, nodes=nodes, gpn=8, tiers=tiers, seed=seed), encoding="utf-8"
        )
    (folder / "gemm_h100.csv").write_text(gemm_csv(gpu, EXAMPLE_GEMM, seed=5), encoding="utf-8")


# -- helpers ---------------------------------------------------------------------------------------


def read_nccl_log(path: str):
    """The one run of a one-run log."""
    (log,) = read_nccl_logs(path)
    return log


def _write(path: pathlib.Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def _cli(argv: list[str]) -> int:
    """The sub-command as shardmeter.cli.app.main runs it (one-line error, exit 2)."""
    from shardmeter.cli.app import _Parser, main

    if "calibrate" in main.__globals__["COMMANDS"] or _wired():
        return main(argv)
    p = _Parser(prog="shardmeter")
    cal_cli.add_calibrate_parser(p.add_subparsers(dest="command"))
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except shardmeter.errors.ShardMeterError as exc:
        print(f"shardmeter: error: {exc}", file=sys.stderr)
        return 2


def _wired() -> bool:
    from shardmeter.cli.app import _register_optional_commands, build_parser

    _register_optional_commands()
    try:
        build_parser().parse_args(["calibrate", "x", "--out", "y"])
    except SystemExit:
        return False
    return True


H100 = get_registry().get("hardware", "h100-sxm")
NVLINK4 = get_registry().get("interconnect", "nvlink4")
IB_NDR = get_registry().get("interconnect", "ib-ndr")
TRUE_INTRA = (0.70, 4.0)  # efficiency, latency us
TRUE_INTER = (0.85, 15.0)


def _tiers():
    return [
        (NVLINK4.bandwidth_gb_s * 1e9 * TRUE_INTRA[0], TRUE_INTRA[1] * 1e-6),
        (IB_NDR.bandwidth_gb_s * 1e9 * TRUE_INTER[0] * 8 / 8, TRUE_INTER[1] * 1e-6),
    ]


def _within(got: float, want: float, tol: float = 0.05) -> bool:
    return abs(got - want) <= tol * abs(want)


# -- nccl-tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_one_node_log_recovers_latency_and_efficiency(tmp_path, kind):
    log = read_nccl_log(
        _write(tmp_path / f"{kind}.txt", nccl_log(kind, nodes=1, gpn=8, tiers=_tiers(), seed=7))
    )
    assert (log.collective, log.ranks, log.nodes, log.gpus_per_node) == (kind, 8, 1, 8)
    fit = fit_tier(NVLINK4, [log], nics_per_node=8)
    assert _within(fit.efficiency, TRUE_INTRA[0]), fit
    assert _within(fit.latency_us, TRUE_INTRA[1]), fit


def test_multi_node_logs_recover_the_inter_node_tier_through_the_command(tmp_path):
    logs = [
        _write(tmp_path / "ar1.txt", nccl_log("all_reduce", nodes=1, gpn=8, tiers=_tiers(), seed=1)),
        _write(tmp_path / "ag1.txt", nccl_log("all_gather", nodes=1, gpn=8, tiers=_tiers(), seed=2)),
        _write(tmp_path / "ar4.txt", nccl_log("all_reduce", nodes=4, gpn=8, tiers=_tiers(), seed=3)),
        _write(tmp_path / "a2a2.txt", nccl_log("all_to_all", nodes=2, gpn=8, tiers=_tiers(), seed=4)),
    ]
    out = tmp_path / "cal.toml"
    doc = cal_cli.run_calibrate(logs, out=str(out), gpu="h100-sxm")
    data = tomllib.loads(out.read_text(encoding="utf-8"))
    links = {e["name"]: e for e in data["link"]}
    assert _within(links["nvlink4"]["efficiency"], TRUE_INTRA[0])
    assert _within(links["nvlink4"]["latency_us"], TRUE_INTRA[1])
    assert _within(links["ib-ndr"]["efficiency"], TRUE_INTER[0])
    assert _within(links["ib-ndr"]["latency_us"], TRUE_INTER[1])
    assert "nccl-tests all_reduce, all_to_all (ar4.txt:1, a2a2.txt:1;" in links["ib-ndr"]["source"]
    assert [i["file"] for i in data["provenance"]["inputs"]] == ["ar1.txt", "ag1.txt", "ar4.txt", "a2a2.txt"]
    assert len(doc["links"]) == 2


def test_older_and_per_iteration_log_layouts_parse_the_same(tmp_path):
    old = read_nccl_log(
        _write(
            tmp_path / "all_gather_perf.log",
            nccl_log("all_gather", nodes=1, gpn=4, tiers=_tiers(), started_line=False),
        )
    )
    new = read_nccl_log(
        _write(tmp_path / "x.txt", nccl_log("all_gather", nodes=1, gpn=4, tiers=_tiers(), per_iter=True))
    )
    assert old.collective == new.collective == "all_gather"
    assert old.ranks == new.ranks == 4
    assert [r.time_us for r in old.rows] == pytest.approx([r.time_us for r in new.rows], rel=0.05)


def test_a_log_without_a_collective_name_is_an_error(tmp_path):
    path = _write(
        tmp_path / "run.txt", nccl_log("all_gather", nodes=1, gpn=4, tiers=_tiers(), started_line=False)
    )
    with pytest.raises(ScenarioError, match="cannot tell the collective"):
        read_nccl_log(path)


def test_a_malformed_row_names_file_line_and_column(tmp_path, capsys):
    text = nccl_log("all_reduce", nodes=1, gpn=8, tiers=_tiers()).splitlines()
    i = next(i for i, ln in enumerate(text) if ln.strip().startswith("1024 "))
    text[i] = text[i].replace("float     sum      -1", "float     sum      -1    abc", 1)
    path = _write(tmp_path / "all_reduce.txt", "\n".join(text))
    assert _cli(["calibrate", path, "--gpu", "h100-sxm", "--out", str(tmp_path / "o.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"shardmeter: error: {path}:{i + 1}: time (column 6): expected a number in ASCII digits, got 'abc'"
    ]
    assert not (tmp_path / "o.toml").exists()


# -- GEMM ------------------------------------------------------------------------------------------


def test_gemm_csv_recovers_the_efficiency_of_each_precision(tmp_path):
    path = _write(tmp_path / "g.csv", gemm_csv(H100, {"bf16": 0.71, "fp8": 0.58}, seed=3))
    fits = {f.field: f for f in fit_gemm(H100, read_gemm_csv(path), path)}
    assert _within(fits["matmul_efficiency"].efficiency, 0.71)
    assert _within(fits["matmul_efficiency_fp8"].efficiency, 0.58)
    assert fits["matmul_efficiency"].error_after < fits["matmul_efficiency"].error_before
    # the curve: achieved fraction of peak rises with GEMM size, and the model follows it
    curve = fits["matmul_efficiency"].curve
    assert [c[1] for c in curve] == sorted(c[1] for c in curve)
    assert all(abs(a - m) < 0.03 for _, a, m in curve)


@pytest.mark.parametrize(
    ("cells", "field"),
    [
        ("4096,0,4096,bf16,1e-3", "n"),
        ("4096,4096,4096,int8,1e-3", "dtype"),
        ("4096,4096,4096,bf16,-1", "seconds"),
    ],
)
def test_a_bad_gemm_cell_names_file_line_and_column(tmp_path, cells, field):
    path = _write(tmp_path / "g.csv", "m,n,k,dtype,seconds\n1024,1024,1024,bf16,1e-4\n" + cells + "\n")
    with pytest.raises(ScenarioError) as exc:
        read_gemm_csv(path)
    assert str(exc.value).startswith(f"{path}:3: $.{field}: ")


# -- measured steps --------------------------------------------------------------------------------


def _step_scenario(seq: int, gb: int, measured: float | None = None) -> dict:
    sc = {
        "model": {"preset": "llama3-8b", "seq_len": seq},
        "training": {"global_batch": gb, "recompute": "selective"},
        "island": [{"gpu": "h100-sxm", "nodes": 1}],
        "parallelism": {"tp": 2, "sharding": "zero1", "sequence_parallel": True},
    }
    if measured is not None:
        sc["measured"] = {"tokens_per_s_per_gpu": measured}
    return sc


def _toml(sc: dict) -> str:
    from shardmeter.calibrate.overlay_out import toml_value as _toml_value

    lines = []
    for table, body in sc.items():
        if isinstance(body, list):
            for entry in body:
                lines += [f"[[{table}]]", *(f"{k} = {_toml_value(v)}" for k, v in entry.items())]
        else:
            lines += [f"[{table}]", *(f"{k} = {_toml_value(v)}" for k, v in body.items())]
    return "\n".join(lines) + "\n"


def test_steps_recover_matmul_and_attention_efficiency(tmp_path):
    import attrs

    truth = attrs.evolve(H100, matmul_efficiency=0.6, attention_efficiency=0.45)
    reg = get_registry().override("hardware", truth)
    files = []
    for i, (seq, gb) in enumerate([(1024, 64), (4096, 32), (8192, 16), (16384, 8)]):
        tps = shardmeter.estimate(_step_scenario(seq, gb), registry=reg).tokens_per_s_per_gpu
        files.append(_write(tmp_path / f"run{i}.toml", _toml(_step_scenario(seq, gb, tps))))
    fit = fit_steps(files, get_registry())
    assert _within(fit.values[("h100-sxm", "matmul_efficiency")], 0.6)
    assert _within(fit.values[("h100-sxm", "attention_efficiency")], 0.45)
    assert fit.error_after < 0.005 < fit.error_before


def test_calibrating_on_one_bundled_source_lowers_its_error(capsys):
    files = sorted(str(p) for p in (PUBLISHED / "megatron-readme-2020").glob("*.toml"))
    fit = fit_steps(files, get_registry())
    with capsys.disabled():
        print(f"\nmegatron-readme-2020: mean |error| {fit.error_before:.2%} -> {fit.error_after:.2%}")
    assert fit.error_after < fit.error_before - 0.005
    assert {g for g, _ in fit.values} == {"v100-sxm2-32gb", "a100-sxm-40gb"}


# -- end to end: the overlay in a scenario ---------------------------------------------------------


def test_overlay_loads_through_catalog_and_moves_the_prediction(tmp_path, capsys):
    csv_path = _write(tmp_path / "g.csv", gemm_csv(H100, {"bf16": 0.5}, noise=0.0))
    rc = _cli(["calibrate", csv_path, "--gpu", "h100-sxm", "--out", str(tmp_path / "cal.toml")])
    assert rc == 0
    assert "matmul_efficiency 0.500" in capsys.readouterr().out
    sc = _step_scenario(4096, 32)
    base = shardmeter.estimate(sc, overrides=[f"training.global_batch={32}"])
    _write(tmp_path / "run.toml", 'catalog = "cal.toml"\n' + _toml(sc))
    cal = shardmeter.estimate(str(tmp_path / "run.toml"))
    assert cal.breakdown_s["compute"] > base.breakdown_s["compute"] * 1.15  # 0.65 -> 0.50: GEMMs 30 % slower
    assert any(
        n.startswith(f"catalog {tmp_path / 'cal.toml'}: gpu 'h100-sxm' applied (matmul_efficiency=0.5")
        for n in cal.notes
    )
    assert base.notes == [n for n in cal.notes if not n.startswith("catalog ")]
    # the same overlay through a list, and an overlay entry under a new name adds a record
    _write(
        tmp_path / "new.toml",
        '[[gpu]]\nname = "h100-slow"\nmemory_gb = 80.0\nmemory_bandwidth_gb_s = 3350.0\npeak_tflops = { bf16 = 400.0 }\n',
    )
    sc2 = dict(sc, island=[{"gpu": "h100-slow", "nodes": 1}])
    _write(tmp_path / "run2.toml", 'catalog = ["cal.toml", "new.toml"]\n' + _toml(sc2))
    rep = shardmeter.estimate(str(tmp_path / "run2.toml"))
    assert rep.feasible and any("'h100-sxm' not used" in n for n in rep.notes)


def test_bad_overlay_names_file_line_and_field(tmp_path):
    _write(
        tmp_path / "cal.toml",
        '[provenance]\ntool = "x"\n\n[[gpu]]\nname = "h100-sxm"\nmatmul_efficency = 0.5\n',
    )
    _write(tmp_path / "run.toml", 'catalog = "cal.toml"\n' + _toml(_step_scenario(4096, 32)))
    with pytest.raises(ScenarioError) as exc:
        shardmeter.estimate(str(tmp_path / "run.toml"))
    assert str(exc.value) == (
        f"{tmp_path / 'cal.toml'}:6: $.gpu[0].matmul_efficency: unknown field of HardwareProfile "
        "(did you mean 'matmul_efficiency'?)"
    )
    _write(tmp_path / "cal.toml", '[[gpu]]\nname = "h100-sxm"\nmatmul_efficiency = 1.5\n')
    with pytest.raises(
        ScenarioError, match=r"cal.toml:1: \$.gpu\[0\].matmul_efficiency: expected a fraction"
    ):
        shardmeter.estimate(str(tmp_path / "run.toml"))
    with pytest.raises(ScenarioError, match=r"\$.catalog: expected a catalog overlay path"):
        shardmeter.estimate(str(tmp_path / "run.toml"), overrides=["catalog=3"])


def test_out_never_replaces_an_input(tmp_path, capsys):
    csv_path = _write(tmp_path / "g.csv", gemm_csv(H100, {"bf16": 0.5}))
    before = pathlib.Path(csv_path).read_text(encoding="utf-8")
    assert _cli(["calibrate", csv_path, "--gpu", "h100-sxm", "--out", csv_path]) == 2
    assert "refusing to overwrite an input" in capsys.readouterr().err
    assert pathlib.Path(csv_path).read_text(encoding="utf-8") == before


def test_examples_are_real_format_and_recover_their_stated_figures(tmp_path):
    logs = sorted(str(p) for p in EXAMPLES.glob("*.txt"))
    assert len(logs) == 4
    doc = cal_cli.run_calibrate(
        [*logs, str(EXAMPLES / "gemm_h100.csv")], out=str(tmp_path / "c.toml"), gpu="h100-sxm"
    )
    fits = {f["link"]: f["joint"] for f in doc["links"]}
    assert _within(fits["nvlink4"]["efficiency"], 0.78) and _within(fits["nvlink4"]["latency_us"], 3.0)
    assert _within(fits["ib-ndr"]["efficiency"], 0.90) and _within(fits["ib-ndr"]["latency_us"], 12.0)
    gem = {g["field"]: g["efficiency"] for g in doc["gemm"]}
    assert _within(gem["matmul_efficiency"], EXAMPLE_GEMM["bf16"]) and _within(
        gem["matmul_efficiency_fp8"], EXAMPLE_GEMM["fp8"]
    )
    step = shardmeter.load_scenario(EXAMPLES / "measured-step.toml")
    assert step.measured


def test_help_has_an_example():
    p = argparse.ArgumentParser(prog="shardmeter")
    cal_cli.add_calibrate_parser(p.add_subparsers())
    sub = p._subparsers._group_actions[0].choices["calibrate"]
    assert "example:\n  shardmeter calibrate " in sub.format_help()

"""shardmeter calibrate on nccl-tests logs as clusters write them: the real logs of
examples/calibration/ (their origins in each file's header and examples/calibration/README.md),
launcher prefixes, several runs and collectives per file, element types other than float, and
each collective fitted to its own rate (an NVLink-SHARP all-reduce is recorded, not applied to
the link every collective uses)."""

from __future__ import annotations

import pathlib
import sys

import pytest

from shardmeter.calibrate import cli as cal_cli
from shardmeter.calibrate.nccl import fit_link, read_nccl_logs
from shardmeter.errors import ScenarioError
from shardmeter.registry.manager import get_registry
from shardmeter.resolve.overlay import read_overlay

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_calibrate import NVLINK4, _cli, _tiers, _within, _write, nccl_log

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples" / "calibration"
EFA = EXAMPLES / "aws_eks_efa_t4_2nodes_all_reduce.log"
A100 = EXAMPLES / "modal_a100_1node_all_reduce.log"
SOCKET = EXAMPLES / "nccl_ebpf_rtx5090_socket_all_reduce_all_gather.log"
H200 = EXAMPLES / "skypilot_gke_h200_2nodes_all_gather_perf.log"


# -- the real logs ---------------------------------------------------------------------------------


def test_real_open_mpi_tagged_log_fits_the_network_link(tmp_path):
    """AWS EKS, 2 x g4dn.metal (T4) over EFA: [1,R]<stdout>: prefixes, both ranks' NCCL INFO lines."""
    (log,) = read_nccl_logs(str(EFA))
    assert (log.collective, log.ranks, log.nodes, log.device) == ("all_reduce", 2, 2, "Tesla T4")
    assert len(log.rows) == 29 and log.rows[-1].size_bytes == 1073741824  # two size-0 rows dropped
    out = tmp_path / "efa.toml"
    doc = cal_cli.run_calibrate([str(EFA)], out=str(out), inter="efa-v2", intra="pcie4", nics_per_node=1)
    joint = doc["links"][0]["joint"]
    # 1 GiB in 344,981 us over 2 ranks is 3.11 GB/s busbw: 0.25 of the EFA's 12.5 GB/s
    assert 0.2 < joint["efficiency"] < 0.26 and 20.0 < joint["latency_us"] < 45.0
    assert joint["mean_abs_error"] < 0.15
    data = tomllib.loads(out.read_text(encoding="utf-8"))
    assert data["link"][0]["name"] == "efa-v2"
    assert data["collective"][0]["logs"] == [f"{EFA.name}:9"]


def test_real_one_node_log_fits_nvlink(tmp_path):
    """Modal, 8 x A100-SXM4-40GB in one node, all_reduce_perf 8 B to 128 MB."""
    doc = cal_cli.run_calibrate([str(A100)], out=str(tmp_path / "a.toml"), gpu="a100-sxm-40gb")
    joint = doc["links"][0]["joint"]
    assert doc["links"][0]["link"] == "nvlink3"
    # 128 MB at 168 GB/s busbw of the 300 GB/s NVLink 3, with the latency term: 0.45 - 0.6
    assert 0.45 < joint["efficiency"] < 0.6 and 2.0 < joint["latency_us"] < 6.0
    assert joint["mean_abs_error"] < 0.1


def test_real_file_of_two_collectives_fits_each_to_its_own_rate(tmp_path):
    """One host, an RTX 5090 shared by 2 ranks over NCCL's socket transport: all_reduce_perf_mpi
    then all_gather_perf_mpi in one file, each run's rows and rank lines its own."""
    ar, ag = read_nccl_logs(str(SOCKET))
    assert (ar.collective, ag.collective) == ("all_reduce", "all_gather")
    assert (ar.line, ag.line) == (17, 50) and ar.ranks == ag.ranks == 2
    assert ag.rows[0].size_bytes == 1048576  # count 131072 floats per rank x 2 ranks
    out = tmp_path / "s.toml"
    cal_cli.run_calibrate([str(SOCKET)], out=str(out), intra="ethernet-25g")
    ov = read_overlay(str(out))
    recs = {r.fields["collective"]: r.fields for r in ov.collectives}
    assert set(recs) == {"all_reduce", "all_gather"}
    assert recs["all_reduce"]["logs"] == [f"{SOCKET.name}:17"]
    assert recs["all_gather"]["logs"] == [f"{SOCKET.name}:50"]
    assert recs["all_reduce"]["latency_us"] != recs["all_gather"]["latency_us"]
    (link,) = ov.entries
    assert "all_reduce, all_gather" in link.fields["source"]


def test_real_two_node_h200_all_gather_is_refused_with_its_figures(tmp_path, capsys):
    """SkyPilot on GKE, 2 x 8 H200: two runs in one file (SkyPilot + Open MPI prefixes, then
    GCP's own pods). NCCL overlaps the NVLink and network parts of its ring; the model adds
    them, so the network part left over is faster than the NICs: refused, never written."""
    runs = read_nccl_logs(str(H200))
    assert [(r.collective, r.ranks, r.nodes, r.line) for r in runs] == [
        ("all_gather", 16, 2, 11),
        ("all_gather", 16, 2, 61),
    ]
    out = tmp_path / "h.toml"
    rc = _cli(["calibrate", str(H200), "--gpu", "h200-sxm", "--inter", "roce-400g", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "all_gather on link 'roce-400g': " in err[0] and "x the link's wire rate 50 GB/s" in err[0]
    assert not out.exists()


# -- log formats -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    ["[1,0]<stdout>:", "  0: ", "[0] ", "(head, rank=0, pid=3808) [1,0]<stdout>:"],
    ids=["open-mpi", "srun-label", "hydra", "skypilot"],
)
def test_launcher_prefixes_are_dropped(tmp_path, prefix):
    text = nccl_log("all_gather", nodes=1, gpn=8, tiers=_tiers(), seed=3)
    plain = read_nccl_logs(_write(tmp_path / "plain.txt", text))[0]
    noise = f"{prefix.replace('<stdout>', '<stderr>')}# nThread 1 nGpus 99\n" if "stdout" in prefix else ""
    tagged = noise + "".join(prefix + ln + "\n" for ln in text.splitlines())
    got = read_nccl_logs(_write(tmp_path / "tagged.txt", tagged))
    assert len(got) == 1 and got[0].ranks == 8
    assert [(r.size_bytes, r.time_us) for r in got[0].rows] == [(r.size_bytes, r.time_us) for r in plain.rows]


def test_bf16_log_counts_two_bytes_per_element(tmp_path):
    text = nccl_log("all_reduce", nodes=1, gpn=8, tiers=_tiers(), seed=2, dtype="bfloat16")
    (log,) = read_nccl_logs(_write(tmp_path / "ar.txt", text))
    assert log.dtypes == ("bfloat16",)
    fit = fit_link(NVLINK4, [log], nics_per_node=8).joint
    assert _within(fit.efficiency, 0.70) and _within(fit.latency_us, 4.0)
    # the same rows read as float (4 bytes) would say twice the elements: the count disagrees
    bad = text.replace("bfloat16", "   float")
    with pytest.raises(ScenarioError, match=r"ar2.txt:\d+: size 8 B is not count 4 x 4 B \(float\)"):
        read_nccl_logs(_write(tmp_path / "ar2.txt", bad))


def test_per_rank_count_of_all_gather_checks_the_rank_lines(tmp_path):
    text = nccl_log("all_gather", nodes=1, gpn=8, tiers=_tiers(), seed=2)
    lines = [ln for ln in text.splitlines() if "#  Rank  7 " not in ln]  # one rank line lost
    with pytest.raises(ScenarioError, match=r"x 7 ranks: the table and the log's '# Rank' lines"):
        read_nccl_logs(_write(tmp_path / "ag.txt", "\n".join(lines) + "\n"))


def test_several_collectives_in_one_file_each_get_their_own_fit(tmp_path):
    ar = nccl_log("all_reduce", nodes=1, gpn=8, tiers=_tiers(), seed=1)
    ag = nccl_log("all_gather", nodes=1, gpn=8, tiers=_tiers(), seed=2)
    rs = nccl_log("reduce_scatter", nodes=1, gpn=8, tiers=_tiers(), seed=3)
    path = _write(tmp_path / "node.log", ar + ag + rs)
    logs = read_nccl_logs(path)
    assert [lg.collective for lg in logs] == ["all_reduce", "all_gather", "reduce_scatter"]
    res = fit_link(NVLINK4, logs, nics_per_node=8)
    assert [c.collective for c in res.collectives] == ["all_reduce", "all_gather", "reduce_scatter"]
    assert all(c.applied and _within(c.fit.efficiency, 0.70) for c in res.collectives)


def test_sendrecv_log_is_fitted_as_one_step_of_the_whole_buffer(tmp_path):
    """sendrecv_perf: each rank sends S to the next; busbw = algbw = S / t (doc/PERFORMANCE.md)."""
    bw, lat = 450e9 * 0.6, 5e-6
    sizes = [8 * 2**i for i in range(28)]
    rows = "".join(
        f"{s:12d}  {s // 4:12d}     float     sum      -1  {(lat + s / bw) * 1e6:7.2f}  "
        f"{s / (lat + s / bw) / 1e9:6.2f}  {s / (lat + s / bw) / 1e9:6.2f}       0\n"
        for s in sizes
    )
    head = nccl_log("all_reduce", nodes=1, gpn=8, tiers=_tiers()).split("#       size")[0]
    head = head.replace("all_reduce_perf", "sendrecv_perf")
    text = (
        head
        + "#       size         count      type   redop    root     time   algbw   busbw  #wrong\n"
        + rows
    )
    (log,) = read_nccl_logs(_write(tmp_path / "sr.txt", text))
    res = fit_link(NVLINK4, [log], nics_per_node=8)
    (c,) = res.collectives
    assert (c.collective, c.algorithm) == ("sendrecv", "p2p")
    assert _within(c.fit.efficiency, 0.6, 0.02) and _within(c.fit.latency_us, 5.0, 0.05)


# -- each collective its own rate ------------------------------------------------------------------


def test_nvlink_sharp_all_reduce_is_recorded_not_applied_to_the_link(tmp_path, capsys):
    """An H100 node's NVLS all-reduce (busbw 1.07 x the wire) with its ring all-gather (0.78):
    the link takes the all-gather's rate; the all-reduce's is kept in [[collective]]. The code
    before this raised the link's bandwidth to the all-reduce's for every collective."""
    nvls = [(NVLINK4.bandwidth_gb_s * 1e9 * 1.07, 3.0e-6), (1.0, 1.0)]
    ring = [(NVLINK4.bandwidth_gb_s * 1e9 * 0.78, 3.0e-6), (1.0, 1.0)]
    ar = _write(tmp_path / "ar.txt", nccl_log("all_reduce", nodes=1, gpn=8, tiers=nvls, seed=1))
    ag = _write(tmp_path / "ag.txt", nccl_log("all_gather", nodes=1, gpn=8, tiers=ring, seed=2))
    out = tmp_path / "cal.toml"
    assert _cli(["calibrate", ar, ag, "--gpu", "h100-sxm", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "warning: all_reduce on nvlink4 runs 1.07 x the wire rate (in-network reduction)" in printed.err
    assert "warning:" not in printed.out  # what must be seen goes to stderr
    data = tomllib.loads(out.read_text(encoding="utf-8"))
    (link,) = data["link"]
    assert "bandwidth_gb_s" not in link and _within(link["efficiency"], 0.78)
    assert "from nccl-tests all_gather (ag.txt:1;" in link["source"]
    recs = {r["collective"]: r for r in data["collective"]}
    assert recs["all_reduce"]["algorithm"] == "in-network" and recs["all_reduce"]["applied"] is False
    assert _within(recs["all_reduce"]["efficiency"], 1.07) and recs["all_reduce"]["logs"] == ["ar.txt:1"]
    assert recs["all_gather"]["applied"] is True
    reg = get_registry()
    assert reg.get("interconnect", "nvlink4").bandwidth_gb_s == NVLINK4.bandwidth_gb_s

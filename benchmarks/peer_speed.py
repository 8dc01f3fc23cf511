"""One estimate against a peer's, on the same machine: ShardMeter's ``estimate_ms`` beside
llm-analysis's training analysis of the same job.

Issue 24's bar, "faster than any peer's", is a comparison on one box: its audit machine gave
llm-analysis 0.22 ms and Calculon (quiet logger) 2.6 ms, hence the 0.2 ms target in
benchmarks/release_figures.py. Machines differ by 1.5-2x in single-thread speed, so the target
only means something beside the peer measured on the same machine, which this script does.

The job: GPT-3 175B on 1,024 A100-80GB, TP 8 x PP 8 x DP 16, sequence parallel, ZeRO-1,
micro-batch 1, global batch 1,536, sequence 2,048, selective recompute
(examples/gpt3-175b-a100.toml). llm-analysis 0.2.2 (github.com/cli99/llm-analysis, PyPI
``llm-analysis``) is given the same job through its ``train()`` entry point
(``megatron-lm-175b``, ``a100-sxm-80gb``, ``w16a16e16``, ``activation_recomputation=1``: its
``SELECTIVE``, Korthikanti et al.'s; ``ds_zero=1``; ``flops_efficiency=0.5`` so that it
does not stop to ask for one) with ``log_level="ERROR"``; and, the fairer reading for a peer
that, like ``Estimator``, is built once and asked many times, through one ``LLMAnalysis``
object's ``training()``. Both are CPU time (``time.process_time``) per call, the median of 7 runs
of ``--n`` calls, as ``estimate_ms`` is.

llm-analysis is not a dependency of ShardMeter (it pulls in transformers); give the peer its own
environment (a folder of your choosing, outside the repository) and point the script at its
Python:

    python -m venv PEER && PEER/bin/pip install llm-analysis==0.2.2
    python benchmarks/peer_speed.py --peer-python PEER/bin/python

Without ``--peer-python`` it tries the running Python, and says so when llm-analysis is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# Run by the peer's interpreter: prints one JSON object of the two llm-analysis readings.
PEER_SCRIPT = r"""
import json, statistics, sys, time
n = int(sys.argv[1])
try:
    from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis, train
    from llm_analysis.config import (ParallelismConfig, get_dtype_config_by_name,
                                     get_gpu_config_by_name, get_model_config_by_name)
except ImportError as e:
    print(json.dumps({"error": "llm-analysis is not importable here: " + str(e)}))
    raise SystemExit(0)
import llm_analysis
kw = dict(model_name="megatron-lm-175b", gpu_name="a100-sxm-80gb", dtype_name="w16a16e16",
          log_level="ERROR", batch_size_per_gpu=1, global_batch_size=1536, seq_len=2048,
          tp_size=8, pp_size=8, total_num_gpus=1024, activation_recomputation=1, ds_zero=1,
          flops_efficiency=0.5)
obj = LLMAnalysis(get_model_config_by_name("megatron-lm-175b"), get_gpu_config_by_name("a100-sxm-80gb"),
                  get_dtype_config_by_name("w16a16e16"),
                  ParallelismConfig(tp_size=8, pp_size=8, dp_size=16, sp_size=8), flops_efficiency=0.5)
def call_obj():
    obj.training(batch_size_per_gpu=1, global_batch_size=1536, seq_len=2048,
                 activation_recomputation=ActivationRecomputation(1), ds_zero=DSZeRO(1))
def runs(f):
    f()
    out = []
    for _ in range(7):
        t0 = time.process_time()
        for _ in range(n):
            f()
        out.append((time.process_time() - t0) / n * 1e3)
    return {"value": statistics.median(out), "min": min(out)}
version = getattr(llm_analysis, "__version__", None)
if version is None:
    from importlib.metadata import version as _v
    version = _v("llm-analysis")
print(json.dumps({"version": version, "train_ms": runs(lambda: train(**kw)),
                  "object_training_ms": runs(call_obj)}))
"""


def peer_ms(python: str, n: int) -> dict:
    """The two llm-analysis readings from ``python`` (a JSON object, or ``{"error": ...}``)."""
    proc = subprocess.run([python, "-c", PEER_SCRIPT, str(n)], capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"{python}: exit {proc.returncode}: {tail}"}
    doc: dict = json.loads(lines[-1])
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-python", default=sys.executable, help="the Python that has llm-analysis")
    ap.add_argument("--n", type=int, default=500, help="calls per timing run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from release_figures import estimate_ms  # same directory: the figure release_figures records

    ours = estimate_ms()
    peer = peer_ms(args.peer_python, args.n)
    doc: dict = {"cpus": os.cpu_count(), "shardmeter_estimate_ms": ours, "llm_analysis": peer}
    if "error" not in peer:
        doc["ratio_to_llm_analysis_train"] = ours["value"] / peer["train_ms"]["value"]
        doc["ratio_to_llm_analysis_object"] = ours["value"] / peer["object_training_ms"]["value"]
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(
        f"shardmeter estimate (gpt3-175b-a100.toml, loaded once): {ours['value']:.3f} ms CPU"
        f" (min {ours['min']:.3f}) [{ours['path']}]"
    )
    if "error" in peer:
        print(f"llm-analysis: not measured ({peer['error']}); see --peer-python")
        return 0
    print(
        f"llm-analysis {peer['version']} train():             {peer['train_ms']['value']:.3f} ms CPU"
        f" (min {peer['train_ms']['min']:.3f})"
    )
    print(
        f"llm-analysis {peer['version']} LLMAnalysis.training(): {peer['object_training_ms']['value']:.3f} ms CPU"
        f" (min {peer['object_training_ms']['min']:.3f})"
    )
    print(
        f"shardmeter / llm-analysis: {doc['ratio_to_llm_analysis_train']:.2f} (train), "
        f"{doc['ratio_to_llm_analysis_object']:.2f} (built once)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

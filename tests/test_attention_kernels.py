"""Hopper's FlashAttention-2 kernels priced as a published share of the native fused kernel.

Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608, Figs. 5-6) time FlashAttention-2 and
cuDNN on one H100 SXM5 with the same inputs: the catalogue's FA2 figure is the fitted
``attention_efficiency`` times that share, not a second fitted parameter.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from shardmeter.model.attention import (
    FA3_PAPER_H100_HD128_TFLOPS,
    FLASH_BWD_FACTOR,
    HOPPER_FLASH2_OVER_CUDNN,
    flash2_over_cudnn,
)
from shardmeter.registry.manager import get_registry


def test_the_share_is_the_papers_fwd_bwd_ratio_at_every_length():
    # first principles: a training step runs one forward and one backward (2.5x its FLOPs), so a
    # kernel's rate is 3.5 / (1/fwd + 2.5/bwd); at 16k tokens FA2 335/322 and cuDNN 539/516 TFLOP/s
    fa2 = 3.5 / (1 / 335.0 + 2.5 / 322.0)
    cudnn = 3.5 / (1 / 539.0 + 2.5 / 516.0)
    assert FLASH_BWD_FACTOR == 2.5
    assert flash2_over_cudnn({16384: FA3_PAPER_H100_HD128_TFLOPS[16384]}) == pytest.approx(fa2 / cudnn)
    assert fa2 / cudnn == pytest.approx(0.623, abs=0.001)
    # the same share from 2k to 16k keys, so one share serves the kernels' common ramp
    for seq, row in FA3_PAPER_H100_HD128_TFLOPS.items():
        assert flash2_over_cudnn({seq: row}) == pytest.approx(HOPPER_FLASH2_OVER_CUDNN, abs=0.005), seq
    assert HOPPER_FLASH2_OVER_CUDNN == 0.621


def test_every_catalogue_fa2_figure_is_the_native_one_times_the_share():
    reg = get_registry()
    hopper = [
        g for g in (reg.get("hardware", n) for n in reg.names("hardware")) if g.attention_efficiency_flash2
    ]
    assert {g.name for g in hopper} >= {"h100-sxm", "h200-sxm"}
    for g in hopper:
        assert g.attention_efficiency_flash2 == round(g.attention_efficiency * HOPPER_FLASH2_OVER_CUDNN, 3), (
            g.name
        )


def test_the_fit_reads_one_attention_figure_per_chip():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    import fit_efficiency as fe

    fa2 = {"gpu": "h200-sxm", "fp8": False, "kernel": "flash2"}
    native = {"gpu": "h100-sxm", "fp8": True, "kernel": ""}
    assert fe._param_keys(fa2)[1] == fe._param_keys(native)[1] == ("attention", "h100-sxm", "")
    assert fe._scale(fa2, "attention") == HOPPER_FLASH2_OVER_CUDNN
    assert fe._scale(native, "attention") == 1.0 and fe._scale(fa2, "matmul") == 1.0
    # a materialised-score case reads only its GEMM figure (the scores are two batched GEMMs)
    megatron = {"gpu": "a100-sxm-40gb", "fp8": False, "kernel": "materialized"}
    assert fe._param_keys(megatron) == (("matmul", "a100-sxm-40gb", "16bit"),)
    derived = fe.with_derived({("attention", "h100-sxm", ""): 0.30}, ["h100-sxm"])
    assert derived[("attention", "h100-sxm", "flash2")] == round(0.30 * HOPPER_FLASH2_OVER_CUDNN, 3)


def test_a_held_out_fit_counts_only_what_the_other_cases_determine():
    """A key no training case depends on keeps its catalogue value, which the catalogue's own
    fit took from the held-out group: the fit must not report it as informed. Two cases on one
    GPU, one of them materialising its scores: only the GEMM figure is determined."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    import fit_efficiency as fe

    from shardmeter.validate.run import bundled_validation_dir

    runs = os.path.join(bundled_validation_dir(), "megatron-readme-2020")
    batch, meta = fe.load_rows([runs])
    assert meta and all(m["kernel"] == "materialized" for m in meta)
    _values, params, _, informed = fe.fit(batch, meta, np.ones(len(meta)), (), None, 1, verbose=False)
    assert all(k[0] == "matmul" for k in params)  # no attention key at all
    assert informed and all(k[0] == "matmul" for k in informed)

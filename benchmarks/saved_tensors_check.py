"""What a Llama block and its loss keep for the backward pass, eager against torch.compile.

Checks the activation counts of ``shardmeter.model.activations.activation_bytes_per_layer`` and
``shardmeter.model.memory.logits_bytes_per_element`` on a small block shaped as torchtitan's
Llama 3 block (torchtitan/models/llama3/model/model.py @ 6fc499f6: wq, wk, wv, wo, rotary
embedding in fp32, grouped-query SDPA, SwiGLU w2(silu(w1 x) * w3 x), two RMSNorms, two
residual adds), under torchtitan's per-op selective checkpointing policy (its ``_save_list``
and ``mm_count % 2`` rule, torchtitan/models/llama3/infra/parallelize.py @ 6fc499f6; on CPU
SDPA's flash op is ``_scaled_dot_product_flash_attention_for_cpu``, added to the list in its
CUDA twin's place), without checkpointing and with full checkpointing; and the cross-entropy
``F.cross_entropy(pred.flatten(0, 1).float(), labels)`` of torchtitan/components/loss.py.

Compiled graphs save through ``ctx.save_for_backward``, so a ``saved_tensors_hooks`` pack hook
sees each tensor they keep (the weights are left out, each tensor counted once); eager SAC
keeps its ``MUST_SAVE`` outputs in the caching dispatch mode's storage instead
(torch/utils/checkpoint.py ``_CachingTorchDispatchMode``), read back after the forward.

Needs torch (not a dependency of shardmeter). Runs on CPU with Inductor (a C++ compiler).
Usage: python benchmarks/saved_tensors_check.py
"""

from __future__ import annotations

import collections

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from shardmeter.model.activations import activation_bytes_per_layer

S, H, HEADS, KV_HEADS, FFN, VOCAB = 256, 512, 4, 1, 1792, 4096
HD = H // HEADS
DT = torch.bfloat16


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs in fp32 and cast back, as torchtitan's ``apply_rotary_emb``."""
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    a, b = xf[..., 0], xf[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(3).type_as(x)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wq = nn.Linear(H, HEADS * HD, bias=False)
        self.wk = nn.Linear(H, KV_HEADS * HD, bias=False)
        self.wv = nn.Linear(H, KV_HEADS * HD, bias=False)
        self.wo = nn.Linear(HEADS * HD, H, bias=False)
        self.w1 = nn.Linear(H, FFN, bias=False)
        self.w2 = nn.Linear(FFN, H, bias=False)
        self.w3 = nn.Linear(H, FFN, bias=False)
        self.attention_norm = nn.RMSNorm(H, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(H, eps=1e-5)

    def attention(self, x, cos, sin):
        bs, sl, _ = x.shape
        q = self.wq(x).view(bs, sl, -1, HD)
        k = self.wk(x).view(bs, sl, -1, HD)
        v = self.wv(x).view(bs, sl, -1, HD)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        rep = HEADS // KV_HEADS
        k = k.unsqueeze(3).expand(bs, sl, KV_HEADS, rep, HD).reshape(bs, sl, HEADS, HD)
        v = v.unsqueeze(3).expand(bs, sl, KV_HEADS, rep, HD).reshape(bs, sl, HEADS, HD)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(o.transpose(1, 2).contiguous().view(bs, sl, -1))

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.w2(F.silu(self.w1(self.ffn_norm(h))) * self.w3(self.ffn_norm(h)))


_SAVE = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops.aten.max.default,
}
_STORAGES: list = []


def _context():
    meta: collections.defaultdict[str, int] = collections.defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            meta[f"{mode}_mm_count"] += 1
        save = func in _SAVE and not (func == torch.ops.aten.mm.default and meta[f"{mode}_mm_count"] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    fwd, rec = create_selective_checkpoint_contexts(policy)
    _STORAGES.append(fwd.storage)
    return fwd, rec


class Checkpointed(nn.Module):
    def __init__(self, block: nn.Module, op_sac: bool) -> None:
        super().__init__()
        self.block, self.op_sac = block, op_sac

    def forward(self, x, cos, sin):
        kw = {"context_fn": _context} if self.op_sac else {}
        return checkpoint(self.block, x, cos, sin, use_reentrant=False, preserve_rng_state=False, **kw)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def saved(fn, leave_out=()):
    """``(output, bytes)`` of the tensors the autograd graph keeps (each once; ``leave_out``
    and single elements not counted)."""
    skip = {t.data_ptr() for t in leave_out}
    seen, total = set(), [0]

    def pack(t):
        key = (t.data_ptr(), t.dtype)
        if t.data_ptr() not in skip and t.numel() > 1 and key not in seen:
            seen.add(key)
            total[0] += _nbytes(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, total[0]


def _sac_storage_bytes() -> int:
    total = 0
    for per_op in _STORAGES[-1].values():
        for entry in per_op.values() if isinstance(per_op, dict) else per_op:
            for w in entry if isinstance(entry, (tuple, list)) else [entry]:
                t = getattr(w, "val", w)
                if isinstance(t, torch.Tensor):
                    total += _nbytes(t)
    return total


def expected(recompute: int, compiled: bool) -> float:
    stored, _ = activation_bytes_per_layer(
        S,
        1,
        H,
        HEADS,
        HEADS * HD,
        KV_HEADS * HD,
        FFN,
        True,
        1,
        False,
        recompute,
        False,
        dropout=False,
        compiled=compiled,
    )
    return stored / S


def main() -> None:
    torch.manual_seed(0)
    block = Block().to(DT)
    weights = list(block.parameters())
    angles = torch.outer(torch.arange(S).float(), 1.0 / 500000.0 ** (torch.arange(0, HD, 2).float() / HD))
    cos, sin = angles.cos().view(1, S, 1, -1), angles.sin().view(1, S, 1, -1)
    x = torch.randn(1, S, H, dtype=DT, requires_grad=True)
    consts = [*weights, cos, sin]
    rows = []

    out, kept = saved(lambda: Checkpointed(block, True)(x, cos, sin), consts)
    rows.append(("op SAC, eager", (kept + _sac_storage_bytes()) / S, expected(3, False)))
    out.sum().backward()
    for label, module, rc in (
        ("op SAC, compiled", Checkpointed(block, True), 3),
        ("no recompute, compiled", block, 0),
        ("full recompute, compiled", Checkpointed(block, False), 2),
    ):
        torch._dynamo.reset()
        xc = x.detach().clone().requires_grad_()
        compiled = torch.compile(module, fullgraph=True)
        out, kept = saved(lambda m=compiled, xc=xc: m(xc, cos, sin), consts)
        rows.append((label, kept / S, expected(rc, True)))
        out.sum().backward()
    print(f"{'block':28s} {'kept B/token':>12s} {'model':>8s}")
    for label, got, want in rows:
        print(f"{label:28s} {got:12.0f} {want:8.0f}")

    def loss(pred, labels):
        return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))

    labels = torch.randint(0, VOCAB, (1, S))
    for label, fn in (("eager", loss), ("compiled", torch.compile(loss))):
        pred = torch.randn(1, S, VOCAB, dtype=DT, requires_grad=True)
        out, kept = saved(lambda fn=fn, pred=pred: fn(pred, labels))
        print(
            f"cross-entropy {label:9s} {kept / (S * VOCAB):.2f} bytes per logit (labels and per-token scalars included)"
        )
        out.backward()


if __name__ == "__main__":
    main()

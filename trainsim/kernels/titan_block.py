"""torchtitan's eager Llama block, written from torchtitan's model code (pytorch/torchtitan
torchtrain/models/llama/model.py @ 83c879f18; torchtitan/models/norms.py ``RMSNorm`` and models/llama/model.py @
ba2469780): its own RMSNorm ``self._norm(x.float()).type_as(x) * self.weight``, RoPE by complex multiplication in
fp32 with a shared ``freqs_cis`` buffer, ``repeat_kv`` by expand + reshape, SDPA, ``output.transpose(1, 2)
.contiguous()``, and ``w2(F.silu(w1(x)) * w3(x))``. tests/test_titan_oracle.py holds activations.py's ``"titan"``
costing against what it saves; kernels/alloc_trace.py records its step's allocations.
"""

from __future__ import annotations

import torch

F = torch.nn.functional


class RMSNorm(torch.nn.Module):
    """torchtitan's RMSNorm of 2024 (module doc)."""

    def __init__(self, dim):
        super().__init__()
        self.eps, self.weight = 1e-5, torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope(xq, xk, freqs_cis):
    """RoPE by complex multiplication in fp32 (module doc)."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return (torch.view_as_real(xq_ * fc).flatten(3).type_as(xq),
            torch.view_as_real(xk_ * fc).flatten(3).type_as(xk))


def repeat_kv(x, n_rep):
    """k and v expanded to the query heads by a copy."""
    if n_rep == 1:
        return x
    b, s, kv, d = x.shape
    return x[:, :, :, None, :].expand(b, s, kv, n_rep, d).reshape(b, s, kv * n_rep, d)


class TitanBlock(torch.nn.Module):
    """One transformer block's parameters and attention (module doc)."""

    def __init__(self, h, a, kv, f):
        super().__init__()
        d = h // a
        self.a, self.kv, self.d = a, kv, d
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.wq, self.wk, self.wv, self.wo = lin(h, a * d), lin(h, kv * d), lin(h, kv * d), lin(a * d, h)
        self.w1, self.w2, self.w3 = lin(h, f), lin(f, h), lin(h, f)
        self.attention_norm, self.ffn_norm = RMSNorm(h), RMSNorm(h)

    def attention(self, x, freqs_cis):
        b, s, _ = x.shape
        xq = self.wq(x).view(b, s, self.a, self.d)
        xk = self.wk(x).view(b, s, self.kv, self.d)
        xv = self.wv(x).view(b, s, self.kv, self.d)
        xq, xk = rope(xq, xk, freqs_cis)
        keys, values = repeat_kv(xk, self.a // self.kv), repeat_kv(xv, self.a // self.kv)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
                                             is_causal=True)
        assert out.transpose(1, 2).is_contiguous()  # SDPA's output in the query's (b, s, a, d) layout: no copy
        return self.wo(out.transpose(1, 2).contiguous().view(b, s, -1))


def block_forward(block, x, freqs_cis):
    """The block's forward: attention and SwiGLU MLP, each with its residual add."""
    h = x + block.attention(block.attention_norm(x), freqs_cis)
    n = block.ffn_norm(h)
    return h + block.w2(F.silu(block.w1(n)) * block.w3(n))

"""The built-in workload: a small decoder-only transformer with prefill and KV-cached decode.

Small enough to run on a CPU in seconds, shaped like a real LLM (RMSNorm, rotary-free
multi-head attention through ``scaled_dot_product_attention``, SwiGLU MLP, tied LM head)
so that its kernels are the ones a real model spends its time in.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from nsightflow.harness import Stage, Workload


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.norm1 = RMSNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.norm2 = RMSNorm(d_model)
        self.gate_up = nn.Linear(d_model, 2 * d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor], pos: int) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        k_cache, v_cache = cache
        k_cache[:, :, pos : pos + t] = k
        v_cache[:, :, pos : pos + t] = v
        keys, values = k_cache[:, :, : pos + t], v_cache[:, :, : pos + t]
        # Prefill attends causally within the prompt; a decode token attends to the whole cache.
        att = F.scaled_dot_product_attention(q, keys, values, is_causal=(t > 1))
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class TinyDecoder(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_layers: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.norm = RMSNorm(d_model)

    def forward(self, tokens: torch.Tensor, caches: list, pos: int) -> torch.Tensor:
        x = self.embed(tokens)
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache, pos)
        # Only the last position's logits are needed to pick the next token.
        return self.norm(x[:, -1:]) @ self.embed.weight.t()


def build(
    batch: int = 4,
    prompt: int = 512,
    decode_steps: int = 8,
    vocab: int = 32000,
    d_model: int = 1024,
    n_layers: int = 4,
    n_heads: int = 16,
    d_ff: int = 2816,
    dtype: str = "bfloat16",
    device: str = "auto",
    seed: int = 0,
) -> Workload:
    """Build the default workload: one prefill of ``prompt`` tokens, then greedy decode steps."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    torch_dtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(seed)
    model = TinyDecoder(vocab, d_model, n_layers, n_heads, d_ff)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
    model = model.to(device=device, dtype=torch_dtype).eval()
    prompt_tokens = torch.randint(0, vocab, (batch, prompt), generator=gen).to(device)
    head_dim = d_model // n_heads
    max_len = prompt + decode_steps
    state: dict = {}

    def setup() -> None:
        shape = (batch, n_heads, max_len, head_dim)
        state["caches"] = [
            (torch.zeros(shape, device=device, dtype=torch_dtype), torch.zeros(shape, device=device, dtype=torch_dtype))
            for _ in range(n_layers)
        ]

    @torch.no_grad()
    def prefill(_: int) -> None:
        logits = model(prompt_tokens, state["caches"], 0)
        state["next"] = logits.argmax(-1)

    @torch.no_grad()
    def decode(step: int) -> None:
        logits = model(state["next"], state["caches"], prompt + step)
        state["next"] = logits.argmax(-1)

    params = dict(batch=batch, prompt=prompt, decode_steps=decode_steps, vocab=vocab, d_model=d_model,
                  n_layers=n_layers, n_heads=n_heads, d_ff=d_ff, dtype=dtype, device=device)
    return Workload(
        setup=setup,
        stages=[Stage("prefill", prefill, 1), Stage("decode", decode, decode_steps)],
        device=device,
        dtype=dtype,
        params=params,
    )

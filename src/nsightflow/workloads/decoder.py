"""The built-in workload: a small decoder-only transformer with prefill and KV-cached decode.

Small enough to run on a CPU in seconds, shaped like a real LLM (RMSNorm, rotary-free
multi-head attention through ``scaled_dot_product_attention``, SwiGLU MLP, tied LM head)
so that its kernels are the ones a real model spends its time in. ``cuda_graph=True`` decodes as
serving engines do: each decode step is captured once into a ``torch.cuda.CUDAGraph`` and replayed;
``compile=True`` runs the model under ``torch.compile``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from nsightflow.workloads.api import Stage, Workload, require_sizes, weight_bytes


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

    def forward(
        self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None, pos: int = 0
    ) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        keys, values = k, v
        if cache is not None:
            k_cache, v_cache = cache
            k_cache[:, :, pos : pos + t] = k
            v_cache[:, :, pos : pos + t] = v
            keys, values = k_cache[:, :, : pos + t], v_cache[:, :, : pos + t]
        # Prefill (and training) attend causally within the sequence; a decode token attends to the whole cache.
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

    def forward(self, tokens: torch.Tensor, caches: list[Any], pos: int) -> torch.Tensor:
        x = self.embed(tokens)
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, cache, pos)
        # Only the last position's logits are needed to pick the next token.
        return self.norm(x[:, -1:]) @ self.embed.weight.t()

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Every position's logits, no cache (training)."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.embed.weight.t()


def make_model(
    dtype: str,
    device: str,
    seed: int,
    vocab: int = 32000,
    d_model: int = 1024,
    n_layers: int = 4,
    n_heads: int = 16,
    d_ff: int = 2816,
) -> TinyDecoder:
    """The decoder with seeded random weights, drawn on the device itself (no CPU round trip)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.device(device):
        model = TinyDecoder(vocab, d_model, n_layers, n_heads, d_ff)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, device=device) / math.sqrt(p.shape[-1]))
    return model.to(dtype=getattr(torch, dtype))


def resolve_device(device: str) -> str:
    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")


def _sdpa_context(backend: str | None) -> Callable[[], AbstractContextManager[Any]]:
    """A factory of contexts that restrict SDPA to ``backend`` (a no-op for None)."""
    if backend is None:
        return nullcontext
    if backend not in SDPA_BACKENDS:
        raise ValueError(f"sdpa_backend {backend!r}: use one of {', '.join(SDPA_BACKENDS)} (or leave it out)")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[backend]
    return lambda: sdpa_kernel(which)


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
    cuda_graph: bool = False,
    compile: bool = False,
    sdpa_backend: str | None = None,
) -> Workload:
    """Build the default workload: one prefill of ``prompt`` tokens, then greedy decode steps.

    ``compile``: the model under ``torch.compile(dynamic=True)`` (one graph for every decode position);
    the first pass, a warm-up, compiles it. ``sdpa_backend``: the attention kernels SDPA may use ('flash',
    'efficient', 'cudnn', 'math'; None: torch's choice), as ``torch.nn.attention.sdpa_kernel`` sets them.
    """
    require_sizes(
        batch=batch, prompt=prompt, decode_steps=decode_steps, vocab=vocab, d_model=d_model, n_layers=n_layers
    )
    require_sizes(n_heads=n_heads, d_ff=d_ff)
    if d_model % n_heads:
        raise ValueError(f"d_model {d_model} is not a multiple of n_heads {n_heads}: heads split the model width")
    device = resolve_device(device)
    attention = _sdpa_context(sdpa_backend)
    if cuda_graph and not device.startswith("cuda"):
        raise ValueError("cuda_graph=True needs a CUDA device")
    if cuda_graph and compile:
        raise ValueError("choose cuda_graph or compile, not both")
    torch_dtype = getattr(torch, dtype)
    model: Callable[..., torch.Tensor] = make_model(dtype, device, seed, vocab, d_model, n_layers, n_heads, d_ff).eval()
    weights = weight_bytes(model)
    if compile:
        model = torch.compile(model, dynamic=True)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    prompt_tokens = torch.randint(0, vocab, (batch, prompt), generator=gen, device=device)
    shape = (batch, n_heads, prompt + decode_steps, d_model // n_heads)
    caches = [
        (torch.zeros(shape, device=device, dtype=torch_dtype), torch.zeros(shape, device=device, dtype=torch_dtype))
        for _ in range(n_layers)
    ]
    token = torch.zeros((batch, 1), dtype=torch.long, device=device)  # static: CUDA graphs read and write it
    graphs: list[Any] = []

    @torch.no_grad()
    def run_decode(step: int) -> None:
        with attention():
            token.copy_(model(token, caches, prompt + step).argmax(-1))

    def capture_graphs() -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # cuBLAS handles and workspaces exist before capture
                run_decode(0)
        torch.cuda.current_stream().wait_stream(side)
        pool = torch.cuda.graph_pool_handle()
        for step in range(decode_steps):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                run_decode(step)
            graphs.append(graph)

    def setup() -> None:
        if cuda_graph and not graphs:
            capture_graphs()
        for k, v in caches:  # in place: the graphs hold these addresses
            k.zero_()
            v.zero_()

    @torch.no_grad()
    def prefill(_: int) -> None:
        with attention():
            token.copy_(model(prompt_tokens, caches, 0).argmax(-1))

    def decode(step: int) -> None:
        if graphs:
            graphs[step].replay()
        else:
            run_decode(step)

    params = dict(
        batch=batch,
        prompt=prompt,
        decode_steps=decode_steps,
        vocab=vocab,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        d_ff=d_ff,
        dtype=dtype,
        device=device,
        cuda_graph=cuda_graph,
        compile=compile,
        sdpa_backend=sdpa_backend,
        weights_bytes=weights,  # the model's memory as the workload knows it (the report shows it beside the peaks)
        kv_cache_bytes=sum(k.nbytes + v.nbytes for k, v in caches),
    )
    return Workload(
        setup=setup,
        stages=[Stage("prefill", prefill, 1), Stage("decode", decode, decode_steps)],
        device=device,
        dtype=dtype,
        params=params,
    )

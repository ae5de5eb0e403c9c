"""A training step of any model as a workload: forward, backward and optimizer stages, for several iterations.

The model is the built-in decoder (sizes as nsightflow.workloads.decoder.make_model takes them), or a HuggingFace
causal LM from a local checkpoint (``model``) or a config (``config``), as in nsightflow.workloads.hf.

On a GPU, autograd runs the backward operators on its own device thread, not on the thread that
opened the backward stage's range: nsightflow attributes kernels by the range's time window, so they
are counted in backward all the same (see nsightflow.capture.read.attribution).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

from nsightflow.workloads.api import Stage, Workload, require_sizes
from nsightflow.workloads.decoder import make_model, resolve_device

# The optimizers people train with, as torch implements them (each launches different kernels).
OPTIMIZERS: dict[str, Callable[[list[torch.nn.Parameter], float], torch.optim.Optimizer]] = {
    "adamw": lambda p, lr: torch.optim.AdamW(p, lr=lr),
    "adamw_fused": lambda p, lr: torch.optim.AdamW(p, lr=lr, fused=True),
    "adamw_foreach": lambda p, lr: torch.optim.AdamW(p, lr=lr, foreach=True),
    "adamw_plain": lambda p, lr: torch.optim.AdamW(p, lr=lr, foreach=False),
    "sgd": lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9),
}


def build(
    batch: int = 4,
    seq: int = 512,
    iterations: int = 3,
    dtype: str = "bfloat16",
    device: str = "auto",
    lr: float = 1e-4,
    seed: int = 0,
    model: str | None = None,
    config: dict[str, Any] | None = None,
    attn_implementation: str = "sdpa",
    optimizer: str = "adamw",
    autocast: str | None = None,
    **sizes: int,
) -> Workload:
    """Next-token training: cross-entropy over every position, then an optimizer step.

    ``optimizer``: one of OPTIMIZERS (torch's own implementations: AdamW as torch picks it, fused, foreach,
    a plain per-parameter loop, or SGD with momentum). ``autocast``: run forward and loss under
    ``torch.autocast`` in this dtype (a float32 model trained in bf16, as mixed-precision scripts do).
    """
    require_sizes(batch=batch, seq=seq, iterations=iterations)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer {optimizer!r}: use one of {', '.join(OPTIMIZERS)}")
    device = resolve_device(device)
    if model is not None or config is not None:
        from nsightflow.workloads.hf import load_model

        hf: Any = load_model(model, config, dtype, device, attn_implementation, seed).train()
        net: torch.nn.Module = hf
        vocab = int(hf.config.vocab_size)

        def logits_of(ids: torch.Tensor) -> torch.Tensor:
            return hf(input_ids=ids).logits
    else:
        decoder = make_model(dtype, device, seed, **sizes).train()
        net, vocab = decoder, decoder.embed.num_embeddings

        def logits_of(ids: torch.Tensor) -> torch.Tensor:
            return decoder.logits(ids)

    gen = torch.Generator(device=device).manual_seed(seed + 1)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=gen, device=device)
    opt = OPTIMIZERS[optimizer](list(net.parameters()), lr)
    mixed = (
        torch.autocast(device_type=device.split(":")[0], dtype=getattr(torch, autocast)) if autocast else nullcontext()
    )
    state: dict[str, Any] = {}

    def setup() -> None:
        opt.zero_grad(set_to_none=True)
        state.clear()

    def forward(_: int) -> None:
        with mixed:
            logits = logits_of(tokens[:, :-1])
            state["loss"] = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

    def backward(_: int) -> None:
        state.pop("loss").backward()

    def step(_: int) -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    params = dict(
        batch=batch,
        seq=seq,
        iterations=iterations,
        dtype=dtype,
        device=device,
        lr=lr,
        optimizer=optimizer,
        autocast=autocast,
        model=model,
        config=config,
        architecture=type(net).__name__,
        **sizes,
    )
    return Workload(
        setup=setup,
        stages=[Stage("forward", forward), Stage("backward", backward), Stage("optimizer", step)],
        device=device,
        dtype=dtype,
        params=params,
        iterations=iterations,
    )

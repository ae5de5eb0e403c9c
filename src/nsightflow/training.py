"""A training step of any model as a workload: forward, backward and optimizer stages, for several iterations.

The model is the built-in decoder (sizes as nsightflow.decoder.make_model takes them), or a HuggingFace
causal LM from a local checkpoint (``model``) or a config (``config``), as in nsightflow.hf.

On a GPU, autograd runs the backward operators on its own device thread, not on the thread that
opened the backward stage's range: nsightflow attributes kernels by the range's time window, so they
are counted in backward all the same (see nsightflow.attribution).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nsightflow.decoder import make_model, resolve_device
from nsightflow.harness import Stage, Workload


def build(
    batch: int = 4,
    seq: int = 512,
    iterations: int = 3,
    dtype: str = "bfloat16",
    device: str = "auto",
    lr: float = 1e-4,
    seed: int = 0,
    model: str | None = None,
    config: dict | None = None,
    attn_implementation: str = "sdpa",
    **sizes: int,
) -> Workload:
    """Next-token training: cross-entropy over every position, AdamW."""
    device = resolve_device(device)
    if model is not None or config is not None:
        from nsightflow.hf import load_model

        net = load_model(model, config, dtype, device, attn_implementation, seed).train()
        vocab = net.config.vocab_size

        def logits_of(ids: torch.Tensor) -> torch.Tensor:
            return net(input_ids=ids).logits
    else:
        net = make_model(dtype, device, seed, **sizes).train()
        vocab = net.embed.num_embeddings
        logits_of = net.logits
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=gen, device=device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr)
    state: dict = {}

    def setup() -> None:
        optimizer.zero_grad(set_to_none=True)
        state.clear()

    def forward(_: int) -> None:
        logits = logits_of(tokens[:, :-1])
        state["loss"] = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

    def backward(_: int) -> None:
        state.pop("loss").backward()

    def step(_: int) -> None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    params = dict(
        batch=batch,
        seq=seq,
        iterations=iterations,
        dtype=dtype,
        device=device,
        lr=lr,
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

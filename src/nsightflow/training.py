"""A training step as a workload: forward, backward and optimizer stages, repeated for several iterations.

On a GPU, autograd runs the backward operators on its own device thread, not on the thread that
opened the backward stage's range: nsightflow attributes kernels by the range's time window, so they
are counted in backward all the same (see nsightflow.attribution).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nsightflow.decoder import make_model, resolve_device
from nsightflow.harness import Stage, Workload


def build(batch: int = 4, seq: int = 512, iterations: int = 3, dtype: str = "bfloat16", device: str = "auto",
          lr: float = 1e-4, seed: int = 0, **model: int) -> Workload:
    """Next-token training of the built-in decoder (sizes as nsightflow.decoder.make_model takes them: vocab,
    d_model, n_layers, n_heads, d_ff): cross-entropy over every position, AdamW."""
    device = resolve_device(device)
    net = make_model(dtype, device, seed, **model).train()
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    tokens = torch.randint(0, net.embed.num_embeddings, (batch, seq + 1), generator=gen, device=device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr)
    state: dict = {}

    def setup() -> None:
        optimizer.zero_grad(set_to_none=True)
        state.clear()

    def forward(_: int) -> None:
        logits = net.logits(tokens[:, :-1])
        state["loss"] = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

    def backward(_: int) -> None:
        state.pop("loss").backward()

    def step(_: int) -> None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    params = dict(batch=batch, seq=seq, iterations=iterations, dtype=dtype, device=device, lr=lr, **model)
    return Workload(setup=setup, stages=[Stage("forward", forward), Stage("backward", backward),
                                         Stage("optimizer", step)],
                    device=device, dtype=dtype, params=params, iterations=iterations)

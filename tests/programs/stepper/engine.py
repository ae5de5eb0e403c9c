"""A serving loop's engine as a program's own module (nsightflow's tests: steps from a function). Each ``step`` is one
scheduler iteration: a batch of ``rows`` token rows through a two-matrix block, and a sampled next token per row; no
NVTX range anywhere. ``Engine.warm`` calls ``step`` inside it (a call inside a step is part of that step)."""

import torch


class Engine:
    def __init__(self, hidden: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.up = torch.randn(hidden, 4 * hidden, generator=g) / hidden**0.5
        self.down = torch.randn(4 * hidden, hidden, generator=g) / (4 * hidden) ** 0.5

    def step(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.up) @ self.down

    def prefill(self, x: torch.Tensor) -> torch.Tensor:
        return self.step(x)  # one step of the prefill stage, whose own step call is inside it

"""A serving loop's engine as a program's own module (nsightflow's tests: steps from a function). Each ``step`` is one
scheduler iteration: a batch of ``rows`` token rows through a two-matrix block, and a sampled next token per row; no
NVTX range anywhere. ``Engine.prefill`` calls ``step`` inside it (a call inside a step is part of that step).
``pause_s``: every step also waits that long; ``first_s``: the first step of each batch size waits that much more, as
an engine's lazy work per new shape does (a kernel chosen, compiled or tuned once per shape)."""

import time

import torch


class Engine:
    def __init__(self, hidden: int, seed: int = 0, pause_s: float = 0.0, first_s: float = 0.0) -> None:
        self.pause_s, self.first_s = pause_s, first_s
        self.seen: set[int] = set()
        g = torch.Generator().manual_seed(seed)
        self.up = torch.randn(hidden, 4 * hidden, generator=g) / hidden**0.5
        self.down = torch.randn(4 * hidden, hidden, generator=g) / (4 * hidden) ** 0.5

    def step(self, x: torch.Tensor) -> torch.Tensor:
        wait = self.pause_s + (self.first_s if x.shape[0] not in self.seen else 0.0)
        self.seen.add(x.shape[0])
        if wait:
            time.sleep(wait)
        return torch.relu(x @ self.up) @ self.down

    def prefill(self, x: torch.Tensor) -> torch.Tensor:
        return self.step(x)  # one step of the prefill stage, whose own step call is inside it

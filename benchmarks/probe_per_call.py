"""What the operator probe costs each operator call, in the process's own Python (CPU): a loop of small operators
(a linear layer, a scale, a SiLU) plain, then under the probe with and without its NVTX marks and its count, and its
dynamo-guarded twin (the probe a process that loaded torch._dynamo gets). Microseconds added per operator call, the
best of five runs. Runs anywhere: ``python3 benchmarks/probe_per_call.py``."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch._dynamo  # noqa: F401  # loaded, as transformers loads it: the guarded twin is the one used

from nsightflow.capture.inside.flops import Tally
from nsightflow.capture.inside.probe import OpProbe, _GuardedOpProbe

CALLS = 3  # operator calls per round of work


def work(x: torch.Tensor, w: torch.Tensor, rounds: int = 2000) -> torch.Tensor:
    for _ in range(rounds):
        x = torch.nn.functional.silu(torch.nn.functional.linear(x, w) * 0.5)
    return x


def per_call_us(run: Callable[[], object], rounds: int = 2000) -> float:
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - began)
    return best / (rounds * CALLS) * 1e6


def main() -> None:
    x, w = torch.randn(8, 64), torch.randn(64, 64)
    plain = per_call_us(lambda: work(x, w))
    print(f"plain: {plain:.1f} us per operator call")
    for cls in (OpProbe, _GuardedOpProbe):
        for marks, counts in ((False, False), (True, False), (True, True)):
            tally = Tally() if counts else None
            if tally is not None:
                tally.begin("stage")
            probe = cls("nsightflow" if marks else None, tally, None)

            def probed(probe: OpProbe = probe) -> None:
                with probe:
                    work(x, w)

            added = per_call_us(probed) - plain
            print(f"{cls.__name__}, marks {marks}, count {counts}: +{added:.1f} us per operator call")


if __name__ == "__main__":
    main()

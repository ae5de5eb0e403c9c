"""A program that compiles its step with ``torch.compile(fullgraph=True)`` and opens an NVTX range around each step,
as gpt-fast's ``--compile`` does, small enough for a CPU: no nsightflow import. It prints how many graphs
torch.compile made, and each step's time (``step <seconds>``, synchronized). Its matrix FLOPs per step: two
matmuls, (batch x hidden) by (hidden x 4·hidden) and back.
"""

import argparse
import time

import nvtx
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--backend", default="aot_eager", help="torch.compile's backend (inductor on a GPU)")
    parser.add_argument("--mode", default=None, help="torch.compile's mode (reduce-overhead: CUDA graphs, as gpt-fast)")
    a = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    # A module's parameters, as a model's are (CUDA graphs keep them in place; free tensors would be copied in).
    mlp = torch.nn.Sequential(
        torch.nn.Linear(a.hidden, 4 * a.hidden, bias=False),
        torch.nn.ReLU(),
        torch.nn.Linear(4 * a.hidden, a.hidden, bias=False),
    ).to(device=device, dtype=dtype)

    @torch.compile(backend=a.backend, mode=a.mode, fullgraph=True)
    def step(x: torch.Tensor) -> torch.Tensor:
        return mlp(x) + x

    x = torch.randn(a.batch, a.hidden, device=device, dtype=dtype)
    with torch.no_grad():
        for _ in range(a.steps):
            with nvtx.annotate("decode", domain="LLM"):
                t0 = time.perf_counter()
                x = step(x).clone()  # a CUDA graph's output is overwritten by its next replay (as gpt-fast clones)
                if device == "cuda":
                    torch.cuda.synchronize()
                took = time.perf_counter() - t0
            print(f"step {took:.6f}", flush=True)  # its own timing, as gpt-fast prints
    from torch._dynamo.utils import counters

    print(f"graphs {counters['stats']['unique_graphs']}")


if __name__ == "__main__":
    main()

"""A program that compiles its step with ``torch.compile(fullgraph=True)`` and opens an NVTX range around each step,
as gpt-fast's ``--compile`` does, small enough for a CPU: no nsightflow import. It prints how many graphs
torch.compile made, and the stage's FLOPs per step: two matmuls of (batch x hidden) by (hidden x 4·hidden) and back.
"""

import argparse

import nvtx
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--backend", default="aot_eager", help="torch.compile's backend (inductor on a GPU)")
    a = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    w1 = torch.randn(a.hidden, 4 * a.hidden, device=device)
    w2 = torch.randn(4 * a.hidden, a.hidden, device=device) / a.hidden

    @torch.compile(backend=a.backend, fullgraph=True)
    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w1) @ w2

    x = torch.randn(a.batch, a.hidden, device=device)
    with torch.no_grad():
        for _ in range(a.steps):
            with nvtx.annotate("decode", domain="LLM"):
                x = step(x)
                if device == "cuda":
                    torch.cuda.synchronize()
    from torch._dynamo.utils import counters

    print(f"graphs {counters['stats']['unique_graphs']}")


if __name__ == "__main__":
    main()

"""A program with no NVTX range and no nsightflow import, as most published training and inference scripts are.

``--mode train``: a training loop as nanoGPT's ``train.py`` runs it: ``--accum`` forward/backward micro steps per
optimizer step (AdamW), and every ``--eval-every`` iterations an evaluation of ``--eval-batches`` forward passes
under ``torch.no_grad()``. ``--mode generate``: one prefill call over ``--prompt`` tokens, then ``--steps`` decode
calls of one token each, under ``torch.no_grad()``. ``--compile`` compiles the model
(``torch.compile(fullgraph=True)``).

The model: an MLP (bf16 on a GPU), (tokens x hidden) by (hidden x 4·hidden), ReLU, then back to hidden, no biases.
It prints its own step times (``step <kind> <seconds>``), measured with the GPU synchronized, as the programs it
stands for do.
"""

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=["train", "generate"], default="train")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--eval-batches", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--backend", default="aot_eager", help="torch.compile's backend (inductor on a GPU)")
    a = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(a.hidden, 4 * a.hidden, bias=False),
        torch.nn.ReLU(),
        torch.nn.Linear(4 * a.hidden, a.hidden, bias=False),
    ).to(device=device, dtype=dtype)
    run = torch.compile(model, backend=a.backend, fullgraph=True) if a.compile else model

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def timed(kind: str, fn) -> None:
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        print(f"step {kind} {time.perf_counter() - t0:.6f}", flush=True)

    if a.mode == "generate":
        with torch.no_grad():
            timed("prefill", lambda: run(torch.randn(1, a.prompt, a.hidden, device=device, dtype=dtype)))
            for _ in range(a.steps):
                timed("decode", lambda: run(torch.randn(1, 1, a.hidden, device=device, dtype=dtype)))
        return

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    @torch.no_grad()
    def evaluate() -> None:
        model.eval()
        for _ in range(a.eval_batches):
            run(torch.randn(a.batch, a.hidden, device=device, dtype=dtype))
        model.train()

    def iteration() -> None:
        for _ in range(a.accum):
            loss = run(torch.randn(a.batch, a.hidden, device=device, dtype=dtype)).square().mean() / a.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for it in range(a.steps):
        if it % a.eval_every == 0:
            timed("eval", evaluate)
        timed("iteration", iteration)


if __name__ == "__main__":
    main()

"""A PyTorch program with its own NVTX ranges, written as the NVTX guide teaches and with no nsightflow import:
a small decoder-shaped MLP stack, its prefill and each decode step inside a range of domain ``LLM``, the GPU
synchronized before a range ends. nsightflow profiles it as it is (``command: [python, examples/nvtx_program.py]``).
"""

import argparse

import nvtx
import torch


def build(hidden: int, layers: int, device: str, dtype: torch.dtype) -> torch.nn.Module:
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(), torch.nn.Linear(4 * hidden, hidden)]
    return torch.nn.Sequential(*blocks).to(device=device, dtype=dtype)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--torch-nvtx", action="store_true", help="use torch.cuda.nvtx (the default domain)")
    a = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    model = build(a.hidden, a.layers, device, dtype)
    prompt = torch.randn(a.batch, a.prompt, a.hidden, device=device, dtype=dtype)

    def stage(name: str):  # noqa: ANN202
        return torch.cuda.nvtx.range(name) if a.torch_nvtx else nvtx.annotate(name, domain="LLM")

    with torch.no_grad():
        model(prompt)  # warm-up, outside any range
        sync(device)
        with stage("prefill"):
            h = model(prompt)
            sync(device)
        token = h[:, -1:, :]
        for _ in range(a.steps):
            with stage("decode"):
                token = model(token)
                sync(device)
    print(f"done: {a.steps} decode steps on {device}")


if __name__ == "__main__":
    main()

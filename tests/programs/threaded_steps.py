"""A program whose steps run in a worker thread (as a server's do), each inside an NVTX range: ``--steps`` matmuls of
two (n x n) matrices (bf16 on a GPU), ``decode`` ranges of domain ``LLM``. No nsightflow import."""

import argparse
import threading

import nvtx
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--n", type=int, default=64)
    a = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32

    def work() -> None:
        x = torch.randn(a.n, a.n, device=device, dtype=dtype)
        for _ in range(a.steps):
            with nvtx.annotate("decode", domain="LLM"):
                x = (x @ x).tanh()

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()


if __name__ == "__main__":
    main()

"""A serving loop without NVTX ranges (nsightflow's tests: steps from a function): one prefill of ``--prompt`` rows,
then ``--steps`` decode iterations of ``--batch`` rows, each a call of ``Engine.step`` in the ``engine`` module."""

import argparse

import torch
from engine import Engine

p = argparse.ArgumentParser()
for name, default in (("hidden", 64), ("prompt", 32), ("batch", 4), ("steps", 5)):
    p.add_argument(f"--{name}", type=int, default=default)
a = p.parse_args()
engine = Engine(a.hidden)
with torch.no_grad():
    engine.prefill(torch.randn(a.prompt, a.hidden))
    x = torch.randn(a.batch, a.hidden)
    for _ in range(a.steps):
        x = engine.step(x)
print(f"served {a.steps} steps")

"""A serving loop without NVTX ranges (nsightflow's tests: steps from a function): one prefill of ``--prompt`` rows,
then ``--steps`` decode iterations of ``--batch`` rows (or of ``--batches`` in turn), each a call of ``Engine.step``
in the ``engine`` module."""

import argparse

import torch
from engine import Engine

p = argparse.ArgumentParser()
for name, default in (("hidden", 64), ("prompt", 32), ("batch", 4), ("steps", 5)):
    p.add_argument(f"--{name}", type=int, default=default)
p.add_argument("--batches", default="", help="rows of each step in turn, comma-separated (instead of --batch)")
p.add_argument("--pause-ms", type=float, default=0.0, help="every step waits this long too")
p.add_argument("--first-ms", type=float, default=0.0, help="the first step of each batch size waits this much more")
a = p.parse_args()
batches = [int(b) for b in a.batches.split(",")] if a.batches else [a.batch]
engine = Engine(a.hidden, pause_s=a.pause_ms / 1e3, first_s=a.first_ms / 1e3)
with torch.no_grad():
    engine.prefill(torch.randn(a.prompt, a.hidden))
    for i in range(a.steps):
        engine.step(torch.randn(batches[i % len(batches)], a.hidden))
print(f"served {a.steps} steps")

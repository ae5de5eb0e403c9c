"""gpt-fast's own time per decode step, in one process with nothing of nsightflow in it: its ``generate()`` called as
its ``main()`` calls it (the model loaded, ``decode_one_token`` compiled as ``--compile`` compiles it, the call timed
between two device synchronisations), for NEW and LONG new tokens in turns, so that the two lengths share the process's
pace; in each round the difference of the two times over the LONG - NEW extra steps is a decode step (set-up, prefill
and copies, the same at both lengths, cancel), and ``step_s`` is their median over the rounds: the program's own time
per step, its GPU's work included (each call ends synchronized); and each decode step's own period, from one call of
``decode_one_token`` to the next (a clock of this script's around generate.py's step function, in every arm alike):
``period_s``, their median. The period is the host's: where the host issues steps faster than the GPU runs them (a
CUDA-graph replay on a fast host), it is shorter than the step. Run in gpt-fast's folder (pytorch-labs/gpt-fast,
BSD-3-Clause: tests/test_corpus.py's corpus); prints one JSON line ``{"new": [s...], "long": [s...], "step_s": s,
"period_s": s}``.

The KV cache is set up at the longer length first and kept (gpt-fast keeps a cache that is large enough), so both
lengths replay the same compiled graph: the steps attend over the cache of PROMPT + LONG positions.

With ``--hook``, nsightflow's hook in its timed mode (what a command's timed run has: nsightflow.capture.inside.hook)
follows the ranges of generate.py in every other round, and lets them pass untouched in the others, in turns: in one
process, whose pace both share, gpt-fast's own time per decode step without and with the hook (what the hook costs
the program), and nsightflow's steady decode pace from the hook's record, found as a command's timed run finds it
(nsightflow.capture.launch.discovery): ``"hooked": {"new", "long", "step_s", "period_s", "pace_s"}`` beside the
plain numbers.
``--every N,M``: the hook's rounds once for each of its step clock's samplings (one step in N clocked on the GPU:
nsightflow.capture.inside.step_clock.EVERY), in turns with the plain rounds; ``"hooked"`` is the first, each under
``"every"``; with 1 among them after another, its ``"sampled"``: what that other's sampling finds from the same
ranges, every step clocked (the sampled steps' clock against the full one, in one run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint_path", type=Path, required=True)
    p.add_argument("--prompt", type=int, required=True)
    p.add_argument("--new", type=int, required=True)
    p.add_argument("--long", type=int, required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--hook", type=Path, help="the hook's record, written at exit")
    p.add_argument("--every", default="", help="the step clock's samplings to take turns with (default: its own)")
    a = p.parse_args()
    tracker = None
    if a.hook:
        from nsightflow.capture.inside.hook_install import install
        from nsightflow.capture.inside.hook_settings import HookSettings

        tracker = install(HookSettings("timed", str(a.hook)))
        assert tracker is not None
        if tracker.auto is not None:  # generate.py's own ranges are the stages (a timed run drops these at its first)
            tracker.auto.remove()
            tracker.auto = None
    sys.path.insert(0, str(Path.cwd()))
    import generate as g  # gpt-fast's, from its folder
    import torch

    model = g._load_model(a.checkpoint_path, a.device, torch.bfloat16, False)
    torch.manual_seed(1234)
    encoded = torch.randint(0, 1024, (a.prompt,), device=a.device, dtype=torch.int64)  # main()'s synthetic prompt
    if a.compile:
        g.decode_one_token = torch.compile(g.decode_one_token, mode="reduce-overhead", fullgraph=True)
    one_token = g.decode_one_token
    calls: list[int] = []  # when each decode step called decode_one_token (ns): the program's own step clock

    def decode_one_token(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.perf_counter_ns())
        return one_token(*args, **kwargs)

    g.decode_one_token = decode_one_token  # decode_n_tokens looks it up in generate.py's globals at each step

    def timed(new: int, steps: list[float] | None = None) -> float:
        """One generate() of ``new`` tokens, timed as main() times it; ``steps``: its decode steps' periods (s), call
        to next call, added there."""
        g.device_sync(device=a.device)
        first = len(calls)
        t0 = time.perf_counter()
        g.generate(model, encoded, new, batch_size=1, draft_model=None, speculate_k=5, interactive=False,
                   callback=lambda x: x, temperature=0.8, top_k=200)  # fmt: skip
        g.device_sync(device=a.device)
        took = time.perf_counter() - t0
        if steps is not None:
            steps += [(b - c) / 1e9 for c, b in zip(calls[first:], calls[first + 1 :], strict=False)]
        return took

    def follow(on: bool) -> None:
        if tracker is not None:
            tracker.inside = not on  # the hook's own flag: its wrappers pass the ranges to NVTX untouched

    follow(False)
    for n in (a.long, a.new, a.long, a.new):  # compilation and CUDA-graph recording, at the longer cache first
        timed(n)
    from nsightflow.capture.inside import step_clock

    everys = [int(n) for n in a.every.split(",") if n] or [step_clock.EVERY]
    turns: list[int | None] = [None, *everys] if tracker is not None else [None]  # None: plain
    times: dict[int | None, tuple[list[float], list[float]]] = {k: ([], []) for k in turns}
    periods: dict[int | None, list[float]] = {k: [] for k in turns}  # each arm's decode steps, call to next call
    ranges: dict[int, list[int]] = {k: [] for k in everys}  # the hook's ranges of each sampling's rounds
    for r in range(a.rounds):
        for k in turns[r % len(turns) :] + turns[: r % len(turns)]:
            follow(k is not None)
            first = len(tracker.rows()) if tracker is not None else 0
            if k is not None and tracker is not None:
                step_clock.EVERY = k
                tracker.looks.clear()  # the sampling from each name's next range
            times[k][0].append(timed(a.new, periods[k]))
            times[k][1].append(timed(a.long, periods[k]))
            if k is not None and tracker is not None:
                ranges[k] += range(first, len(tracker.rows()))
    follow(False)
    out: dict[str, object] = {"new": times[None][0], "long": times[None][1], "step_s": per_step(*times[None], a)}
    out["period_s"] = statistics.median(periods[None])
    if tracker is not None:
        record = tracker.record()
        every: dict[int, dict[str, object]] = {}
        for k in everys:  # its stages prefill and decode, as the workflow finds them, from its own rounds' ranges
            mine = [record["ranges"][i] for i in ranges[k]]
            new, long = times[k]
            every[k] = {"new": new, "long": long, "step_s": per_step(new, long, a), **decode(mine)}
            every[k]["period_s"] = statistics.median(periods[k])
            if k == 1 and everys[0] != 1:  # every step clocked: what the sampling would have found from them
                every[k]["sampled"] = decode(sampled(mine, everys[0]), every[k]["skip"])  # the same steps
        out["hooked"], out["every"] = every[everys[0]], every
        out["host"] = host(tracker)
    print(json.dumps(out))


def host(tracker: Any) -> dict[str, Any]:
    """What this host makes the hook cost, measured in this process after the rounds: its clock source, one read of
    the clock the hook reads at each range's start and end (µs), the hook's push and pop of a range that is not
    clocked on the GPU (µs a pair, the median of 5 × 20,000) and of one that is, around a small kernel (less that
    kernel alone), with the CPU's model: a pace that differs between machines is read beside these."""
    from nsightflow.capture.inside import step_clock

    def per_us(body: Any, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            body()
        return (time.perf_counter() - t0) / n * 1e6

    def pair() -> None:
        tracker.push("nsightflow.host", "pair")
        tracker.pop("nsightflow.host")

    tracker.inside = False  # the hook following the ranges, as in its rounds (the rounds ended with it bypassed)
    facts: dict[str, Any] = {}
    for key, path in (("clocksource", "/sys/devices/system/clocksource/clocksource0/current_clocksource"),):
        try:
            facts[key] = Path(path).read_text().strip()
        except OSError:
            facts[key] = None
    try:
        facts["cpu"] = next(
            ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in ln
        )
    except (OSError, StopIteration):
        facts["cpu"] = None
    facts["clock_read_us"] = statistics.median(per_us(time.perf_counter_ns, 100_000) for _ in range(5))
    was, step_clock.EVERY = step_clock.EVERY, 0  # no range of this loop clocked on the GPU (EVERY 0: none after FIRST)
    tracker.looks.clear()
    try:
        for _ in range(step_clock.FIRST):
            pair()  # the first FIRST of a range name are clocked: past them
        facts["push_pop_us"] = statistics.median(per_us(pair, 20_000) for _ in range(5))
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():  # a range clocked on the GPU, its stream busy
            x = torch.zeros(16, device="cuda")
            step_clock.EVERY = 1
            tracker.looks.clear()

            def clocked() -> None:
                tracker.push("nsightflow.host", "pair")
                x.add_(1)
                tracker.pop("nsightflow.host")

            def plain() -> None:
                x.add_(1)

            rounds = [per_us(clocked, 5_000) - per_us(plain, 5_000) for _ in range(5)]
            facts["clocked_pair_us"] = statistics.median(rounds)  # over an unclocked pair: what its CUDA calls add
    finally:
        step_clock.EVERY = was
    return facts


def decode(ranges: list[list[int]], skip: list[int] | None = None) -> dict[str, Any]:
    """The steady decode steps' median and mean pace and their walls' sum (s), as a command's timed run finds them;
    ``skip``: the steps set apart (default: those it finds), also returned."""
    from nsightflow.capture.launch.discovery import discover

    found = discover({"ranges": ranges}, "LLM", None)
    skip = list(found.skip.get("decode", ())) if skip is None else skip
    paces = [x for i, x in enumerate(found.every_pace["decode"]) if x is not None and i not in skip]
    walls = [x for i, x in enumerate(found.every_wall["decode"]) if i not in skip]
    return {"pace_s": statistics.median(paces), "mean_pace_s": statistics.fmean(paces), "wall_s": sum(walls),
            "skip": skip}  # fmt: skip


def sampled(ranges: list[list[int]], every: int) -> list[list[int]]:
    """The hook's ranges with the GPU's clock kept only on those a sampling of one in ``every`` clocks
    (nsightflow.capture.inside.step_clock.Sampler over the top-level ranges in order), the others' removed."""
    from nsightflow.capture.inside import step_clock

    was, step_clock.EVERY = step_clock.EVERY, every
    try:
        sampler = step_clock.Sampler()
        return [r if r[2] != 0 or sampler.take(r[1]) else [*r[:7], 0, -1] for r in ranges]
    finally:
        step_clock.EVERY = was


def per_step(new: list[float], long: list[float], a: argparse.Namespace) -> float:
    """A decode step: each round's difference of the times at the two lengths over the extra steps, their median
    (the two runs of a round take turns within a second: the host's drift between rounds cancels)."""
    return statistics.median((b - n) / (a.long - a.new) for n, b in zip(new, long, strict=True))


if __name__ == "__main__":
    main()

"""What the hook's timed mode adds to each stage step of a program, in microseconds, in one process: a step of
one small kernel (``x.add_(1)``, about 10 µs of host launch) plain, inside the hook's push/pop
(nsightflow.capture.inside.hook: the program's ``nvtx.push_range``/``pop_range`` as the timed run follows them; as
shipped, one step in step_clock.EVERY clocked on the GPU, and every step clocked), and
the hook's CUDA parts alone (nsightflow.capture.inside.step_clock: two timing events and their span read; the
stream's idle check), and each CUDA call the clock makes (an event's record, a stream and an event query, a span, the
capture check), once a step. A host-bound loop's step (a CUDA-graph replay: gpt-fast ``--compile``'s decode step,
a quarter of a millisecond) has all of it in its pace. On the GPU host, or any machine (without CUDA only the
Python part is there): ``python3 benchmarks/hook_overhead.py``."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from nsightflow.capture.inside import step_clock
from nsightflow.capture.inside.hook_settings import HookSettings
from nsightflow.capture.inside.hook_timed import TimedTracker

STEPS, WARM = 20000, 500


def per_step_us(body: Callable[[], None], cuda: bool) -> float:
    """Microseconds a call of ``body`` takes, over STEPS calls after WARM (the GPU synchronized around them)."""
    for _ in range(WARM):
        body()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(STEPS):
        body()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / STEPS * 1e6


def main() -> None:
    cuda = torch.cuda.is_available()
    x = torch.zeros(16, device="cuda" if cuda else "cpu")
    tracker = TimedTracker(HookSettings("timed", "/dev/null"))

    def plain() -> None:
        x.add_(1)

    def hooked() -> None:
        tracker.push("LLM", "decode")
        x.add_(1)
        tracker.pop("LLM")

    def marks() -> None:
        start = step_clock.mark()
        x.add_(1)
        end = step_clock.end_mark()
        if start is not None and end is not None and end.query():
            start.elapsed_time(end)

    def idle() -> None:
        step_clock.idle()
        x.add_(1)

    def hooked_all() -> None:  # every step clocked on the GPU, as before the step clock sampled them
        step_clock.EVERY = 1
        tracker.looks.clear()  # (EVERY applies from a name's next look)
        hooked()
        step_clock.EVERY = shipped
        tracker.looks.clear()

    shipped = step_clock.EVERY
    parts = {"hook": hooked, "hook, all clocked": hooked_all, "marks": marks, "idle": idle}
    if cuda:  # each CUDA call the clock makes, once a step
        stream, event, done = torch.cuda.current_stream(), torch.cuda.Event(enable_timing=True), [None, None]
        done[0], done[1] = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for e in done:
            e.record()
        torch.cuda.synchronize()
        parts |= {
            "record": lambda: (x.add_(1), event.record(stream)),
            "stream query": lambda: (x.add_(1), stream.query()),
            "event query": lambda: (x.add_(1), done[1].query()),
            "elapsed": lambda: (x.add_(1), done[0].elapsed_time(done[1])),
            "capturing": lambda: (x.add_(1), torch.cuda.is_current_stream_capturing()),
        }
    for _ in range(2):
        base = per_step_us(plain, cuda)
        row = {"plain": base}
        row.update({k: per_step_us(f, cuda) - base for k, f in parts.items()})
        print("µs a step:", ", ".join(f"{k} {'+' if k != 'plain' else ''}{v:.2f}" for k, v in row.items()))
        tracker.gpu.settle(wait=True)
        tracker.rows().clear()
        tracker.gpu.spans.clear()


def replays() -> None:
    """The hook around a CUDA-graph replay, in turns with the replay plain (median of 9 rounds of STEPS steps each): a
    graph of 2 small kernels, host-bound (the GPU idle at the range's end), and one of ``torch.cuda._sleep`` for
    about 50 µs followed by 80 µs of the loop's own host work (the GPU still busy at the range's end, as gpt-fast
    ``--compile``'s decode step)."""
    import statistics

    tracker = TimedTracker(HookSettings("timed", "/dev/null"))
    x = torch.zeros(16, device="cuda")

    def spin(us: float) -> None:
        end = time.perf_counter() + us / 1e6
        while time.perf_counter() < end:
            pass

    for what, body, host_us in (("2 kernels", lambda: (x.add_(1), x.mul_(1)), 0.0), ("a 50-µs kernel", None, 80.0)):
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        work = body or (lambda: torch.cuda._sleep(100_000))
        with torch.cuda.stream(side):
            work()  # warmed outside the capture, as torch.cuda.graph asks
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            work()

        def plain(g: torch.cuda.CUDAGraph = graph, us: float = host_us) -> None:
            g.replay()
            spin(us)

        def hooked(g: torch.cuda.CUDAGraph = graph, us: float = host_us) -> None:
            tracker.push("LLM", "decode")
            g.replay()
            tracker.pop("LLM")
            spin(us)

        shipped = step_clock.EVERY
        turns = {
            "plain": (plain, shipped),
            f"hook, 1 in {shipped} clocked": (hooked, shipped),
            "hook, all": (hooked, 1),
        }
        got: dict[str, list[float]] = {k: [] for k in turns}
        for r in range(9):
            for name in list(turns)[r % 3 :] + list(turns)[: r % 3]:
                f, step_clock.EVERY = turns[name]
                tracker.looks.clear()
                got[name].append(per_step_us(f, True))
                tracker.rows().clear()
                tracker.gpu.settle(wait=True)
                tracker.gpu.spans.clear()
        step_clock.EVERY = shipped
        base = statistics.median(got["plain"])
        rows = ", ".join(f"{k} +{statistics.median(v) - base:.2f}" for k, v in got.items() if k != "plain")
        print(f"µs a replay step, {what}, {host_us:g} µs of host work: plain {base:.2f}, {rows}")


if __name__ == "__main__":
    main()
    if torch.cuda.is_available():
        replays()

"""Real workloads that fail (or stress names and timing) the way user code does; used by test_failures.py.

The harness imports them as ``workloads:<function>`` with this directory on PYTHONPATH.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

from nsightflow.workloads import Stage, Workload

WEIRD = 'say "hi"; $(touch pwned) `id`\nnext@line/part with spaces'


def _matmul(_: int) -> None:
    a = torch.randn(64, 64)
    a @ a


def raises(**_):
    raise ValueError("model weights not found at /nowhere")


def stage_raises(**_):
    def bad(step: int) -> None:
        if step == 1:
            raise RuntimeError("CUDA out of memory (simulated by the workload)")
        _matmul(step)

    return Workload(setup=lambda: None, stages=[Stage("decode", bad, repeats=3)])


def idle(**_):
    """All the work happens in setup; the stage's range is empty."""
    return Workload(setup=lambda: _matmul(0), stages=[Stage("prefill", lambda step: None)])


def weird_names(**_):
    return Workload(setup=lambda: None, stages=[Stage(WEIRD, _matmul, repeats=2)])


def slow(marker: str, seconds: float = 20.0, **_):
    """Sleeps inside its stage; the marker holds the workload's process id once the stage has started."""

    def stage(step: int) -> None:
        Path(marker).write_text(str(os.getpid()))
        time.sleep(seconds)
        _matmul(step)

    return Workload(setup=lambda: None, stages=[Stage("prefill", stage)])


def gpu_matmuls(stage: str = "prefill", n: int = 1024, repeats: int = 2, device: str = "cuda", **_):
    """``repeats`` bf16 n×n matmuls per step on the GPU (or ``device``), in a stage of any name. The workload
    never synchronizes, leaves ``device`` at its default ('cpu') and declares no dtype: the harness must still
    wait for the GPU before each range ends, and take bf16 as its precision from the probe pass. Measured
    tensor FLOPs must be exactly 2·n³ per matmul."""
    state = {}

    def setup() -> None:
        state["a"] = torch.randn(n, n, device=device).to(torch.bfloat16)
        state["b"] = torch.randn(n, n, device=device).to(torch.bfloat16)

    def step(_: int) -> None:
        for _ in range(repeats):
            state["c"] = state["a"] @ state["b"]

    return Workload(setup=setup, stages=[Stage(stage, step)], params={"n": n, "repeats": repeats})


def mixed_precision(n: int = 1024, **_):
    """Declares dtype bfloat16 but also multiplies in float16 and in float32 with TF32 allowed, as a model
    with a float32 head or a float16 kernel does. Each step: one n×n matmul per precision, so the measured
    tensor FLOPs are exactly 3·2·n³ if, and only if, every precision is counted."""
    state = {}

    def setup() -> None:
        torch.backends.cuda.matmul.allow_tf32 = True
        for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("tf32", torch.float32)):
            state[name] = torch.randn(n, n, device="cuda").to(dtype)

    def step(_: int) -> None:
        for name in ("bf16", "fp16", "tf32"):
            state[name + "_out"] = state[name] @ state[name]

    return Workload(setup=setup, stages=[Stage("mixed", step)], device="cuda", dtype="bfloat16", params={"n": n})


def mode_averse(**_):
    """Runs normally, but refuses to run under a TorchDispatchMode (as some libraries do): the measurement
    must stand, only the analytic count is missing."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    def step(_: int) -> None:
        if _get_current_dispatch_mode_stack():
            raise RuntimeError("this library does not run under a dispatch mode")
        _matmul(0)

    return Workload(setup=lambda: None, stages=[Stage("prefill", step)])


def awkward_names(**_):
    """Stage names torch.profiler's export mangles, and one named like a relabelled stage."""
    return Workload(
        setup=lambda: None,
        stages=[
            Stage("préfill", _matmul),
            Stage("décode", _matmul, repeats=2),
            Stage('a"b', _matmul),
            Stage("0 préfill", _matmul),
        ],
    )


def pass_durations(seconds: list[float], repeats: int = 1, **_):
    """A stage whose every step sleeps ``seconds[k]`` in the k-th pass over the workload (setup starts a pass)."""
    passes = [-1]

    def setup() -> None:
        passes[0] += 1

    def step(_: int) -> None:
        time.sleep(seconds[min(passes[0], len(seconds) - 1)])

    return Workload(setup=setup, stages=[Stage("step", step, repeats=repeats)])


_LEFT_OPEN = []  # files a workload leaves open, so that only the interpreter's teardown flushes them


def exit_marks(path: str, **_):
    """A workload that writes two lines to ``path`` at its exit: ``atexit`` from an exit handler it registers, and
    ``teardown`` from a buffer it never flushes, which only the interpreter's teardown writes out."""
    import atexit

    def mark() -> None:
        with open(path, "a") as f:
            f.write("atexit\n")

    atexit.register(mark)
    held = open(path + ".teardown", "w")  # kept open on purpose
    held.write("teardown\n")
    _LEFT_OPEN.append(held)
    return Workload(setup=lambda: None, stages=[Stage("step", lambda _: None)])


def pass_log(path: str, repeats: int = 2, **_):
    """A stage whose setup (the start of each pass over the workload) appends a line to ``path``."""

    def setup() -> None:
        with open(path, "a") as f:
            f.write("pass\n")

    return Workload(setup=setup, stages=[Stage("step", lambda _: None, repeats=repeats)])


def ranks_matmul(hidden: int = 64, tokens: int = 16, steps: int = 2, device: str = "cpu", dtype: str = "float32", **_):
    """One rank of a job of several processes (torchrun's environment): each step multiplies its own shard
    (tokens x hidden by hidden x hidden, ``dtype``) and all-reduces the result over gloo (on CUDA tensors too). Says
    its rank and pid on stderr, so a capture of the job can tell its ranks apart."""
    import os
    import sys

    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} of {dist.get_world_size()} (pid {os.getpid()})", file=sys.stderr, flush=True)
    on = torch.device(
        device if device == "cpu" else f"cuda:{int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()}"
    )
    gen = torch.Generator().manual_seed(rank)
    kind = getattr(torch, dtype)
    x = torch.randn(tokens, hidden, generator=gen).to(on, kind)
    w = torch.randn(hidden, hidden, generator=gen).to(on, kind)

    def forward(_: int) -> None:
        y = x @ w
        dist.all_reduce(y)

    return Workload(
        setup=lambda: None,
        stages=[Stage("forward", forward, repeats=steps)],
        device=str(on),
        dtype=dtype,
        params={"rank": rank},
    )


def helper_process(marker: str, new_session: bool = False, hold_stdout: bool = False, append_to: str = "", **_):
    """A stage that starts a helper and returns without waiting for it, as user code sometimes does: ``sleep 97``
    (in a session of its own with ``new_session``; holding the harness's stdout with ``hold_stdout``), or a shell
    that appends to ``append_to`` 4 s later, once per run of the stage. Each helper's pid is appended to ``marker``.
    """
    import subprocess

    def stage(step: int) -> None:
        if append_to:
            argv = ["sh", "-c", f'sleep 4; echo corrupted >> "{append_to}"']
        else:
            argv = ["sleep", "97"]
        out = None if hold_stdout else subprocess.DEVNULL
        p = subprocess.Popen(argv, stdout=out, stderr=out, start_new_session=new_session)
        with open(marker, "a") as fh:
            fh.write(f"{p.pid}\n")
        _matmul(step)

    return Workload(setup=lambda: None, stages=[Stage("prefill", stage)])


def chdir_away(to: str = "/tmp", **_):
    """A stage that changes the working directory (as some user code does) before the harness writes its outputs."""

    def stage(step: int) -> None:
        os.chdir(to)
        _matmul(step)

    return Workload(setup=lambda: None, stages=[Stage("prefill", stage)])


def int_matmuls(**_):
    """A 16x16 int64 matmul: GEMM work in a dtype with no FLOP peak."""
    a = torch.arange(256, dtype=torch.int64).reshape(16, 16)
    return Workload(setup=lambda: None, stages=[Stage("mm", lambda step: a @ a)])


def named_stages(names: list[str], **_):
    """Stages with the given names (names that read like values: 'NA', 'nan', '1', 'True')."""
    return Workload(setup=lambda: None, stages=[Stage(n, _matmul) for n in names])


def chatty(megabytes: int = 40, **_):
    """A stage that prints ``megabytes`` MB of output (a debug print left in a loop)."""
    line = "x" * 1023 + "\n"

    def stage(step: int) -> None:
        for _ in range(megabytes * 1024):
            sys.stdout.write(line)
        sys.stdout.flush()
        _matmul(step)

    return Workload(setup=lambda: None, stages=[Stage("prefill", stage)])


def nvtx_program(batch: int = 2, prompt: int = 64, hidden: int = 256, layers: int = 2, steps: int = 4, **_):
    """examples/nvtx_program.py as a callable: the same model, prefill and decode steps (its cost compared with the
    command's)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import nvtx_program as program

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    model = program.build(hidden, layers, device, dtype)
    x = torch.randn(batch, prompt, hidden, device=device, dtype=dtype)
    state: dict = {}

    @torch.no_grad()
    def prefill(_: int) -> None:
        state["token"] = model(x)[:, -1:, :]

    @torch.no_grad()
    def decode(_: int) -> None:
        state["token"] = model(state["token"])

    stages = [Stage("prefill", prefill), Stage("decode", decode, repeats=steps)]
    return Workload(setup=state.clear, stages=stages, device=device, dtype=str(dtype).removeprefix("torch."))


def first_use_state(n: int = 256, cudnn_benchmark: bool = False, device: str = "cpu", **_):
    """A stage that makes a buffer on its first call and keeps it (as an optimizer makes its moments): its first pass
    launches work a later pass does not. ``cudnn_benchmark``: turn on cuDNN's benchmarking, as a convolution net
    does."""
    torch.backends.cudnn.benchmark = cudnn_benchmark
    kept: list[torch.Tensor] = []
    a = torch.randn(n, n, device=device)

    def step(_: int) -> None:
        if not kept:
            kept.append(torch.full((n, n), 2.0, device=device))
        a @ kept[0]

    return Workload(setup=lambda: None, stages=[Stage("step", step, repeats=2)], device=device)


def grouped_experts(
    tokens: int = 4096,
    hidden: int = 1024,
    ffn: int = 1536,
    experts: int = 8,
    device: str = "cuda",
    dtype: str = "bfloat16",
    steps: int = 1,
    **_,
):
    """An MoE's expert projection as one torch._grouped_mm: ``tokens`` rows split unevenly over ``experts``
    (a fixed, seeded routing), each expert an ``hidden`` x ``ffn`` weight. Model FLOPs: exactly 2·T·H·F a step.
    The routing is ``routing(tokens, experts)``."""
    state = {}

    def setup() -> None:
        state["offs"] = routing(tokens, experts).cumsum(0).to(torch.int32).to(device)
        kind = getattr(torch, dtype)
        state["x"] = torch.randn(tokens, hidden, device=device, dtype=kind)
        state["w"] = torch.randn(experts, ffn, hidden, device=device, dtype=kind).transpose(-2, -1)

    def step(_: int) -> None:
        state["y"] = torch._grouped_mm(state["x"], state["w"], offs=state["offs"])

    params = {"tokens": tokens, "hidden": hidden, "ffn": ffn, "experts": experts}
    return Workload(
        setup=setup, stages=[Stage("experts", step, repeats=steps)], device=device, dtype=dtype, params=params
    )


def routing(tokens: int, experts: int) -> torch.Tensor:
    """Tokens per expert of ``grouped_experts``: uneven, seeded, summing to ``tokens``."""
    gen = torch.Generator().manual_seed(0)
    share = torch.rand(experts, generator=gen) + 0.25
    counts = (share / share.sum() * tokens).floor().to(torch.int64)
    counts[-1] += tokens - int(counts.sum())
    return counts


def flex_causal(batch: int = 4, heads: int = 16, seq: int = 2048, head_dim: int = 64, window: int = 0, **_):
    """Compiled flex attention with a causal block mask, bf16, as 2026 LLM code runs it; with ``window``, a causal
    sliding window of that many keys. Model FLOPs a step: Q·Kᵀ and P·V over the kept pairs of every batch row and
    head (seq·(seq+1)/2 causal)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    state = {}
    attend = torch.compile(flex_attention)

    def setup() -> None:
        shape = (batch, heads, seq, head_dim)
        state["qkv"] = [torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        keep = (lambda b, h, q, k: (q >= k) & (q - k < window)) if window else (lambda b, h, q, k: q >= k)
        state["mask"] = create_block_mask(keep, None, None, seq, seq, device="cuda")

    def step(_: int) -> None:
        state["out"] = attend(*state["qkv"], block_mask=state["mask"])

    params = {"batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim, "window": window}
    return Workload(setup=setup, stages=[Stage("attention", step)], device="cuda", dtype="bfloat16", params=params)


_CUSTOM: dict = {}


def fused_mm_op():
    """``nsf_workloads::fused_mm``: a custom operator (torch.library) doing a matmul, as a project's own kernel
    would; PyTorch's FLOP counter has no formula for it. Registered once per process."""
    if "op" not in _CUSTOM:

        @torch.library.custom_op("nsf_workloads::fused_mm", mutates_args=())
        def fused_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a @ b

        _CUSTOM["op"] = fused_mm
    return _CUSTOM["op"]


def custom_matmul(n: int = 64, device: str = "cpu", dtype: str = "float32", **_):
    """Each step: ``n``-square matrices multiplied once by the custom ``fused_mm`` and once by ``torch.mm``. The
    count has a formula for the second only: 2·n³ FLOPs a step."""
    op = fused_mm_op()
    a, b = (torch.randn(n, n, device=device, dtype=getattr(torch, dtype)) for _ in range(2))

    def step(_: int) -> None:
        op(a, b)
        torch.mm(a, b)

    return Workload(setup=lambda: None, stages=[Stage("step", step, repeats=2)], device=device, dtype=dtype)


def gate_steps(n: int = 16, sleep_ms: float = 40.0, steps: int = 6, **_):
    """Each step: a few ``n``-square matmuls, then ``sleep_ms`` of waiting (a host-bound step whose wall the argument
    sets): a regression made on purpose is a larger ``sleep_ms``."""
    a = torch.randn(n, n)

    def step(_: int) -> None:
        for _ in range(4):
            torch.mm(a, a)
        time.sleep(sleep_ms / 1e3)

    return Workload(setup=lambda: None, stages=[Stage("step", step, repeats=steps)], device="cpu", dtype="float32")

"""Run a workload the way Nsight needs it, and count its FLOPs analytically.

A workload is a :class:`Workload`: a ``setup`` that resets state (KV caches) and ordered
stages, each a function of its step index run ``repeats`` times. The harness warms the
workload up outside any range (CUDA context, cuBLAS handles, first-call autotuning),
then runs every stage step inside ``nvtx.annotate(stage, domain=..., payload=step)`` with
``torch.cuda.synchronize()`` before each range ends, so that a range's kernels are the
ones launched inside it and its wall time covers their execution.

Users plug in their own model as a callable ``package.module:function`` that takes
keyword arguments and returns a :class:`Workload`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

DEFAULT_DOMAIN = "nsightflow"


class WorkloadError(RuntimeError):
    """The user's workload could not be loaded or run; the message says why and what to change."""


@dataclass
class Stage:
    """One NVTX-ranged stage: ``fn(step)`` is called for step = 0 .. repeats-1."""

    name: str
    fn: Callable[[int], Any]
    repeats: int = 1


@dataclass
class Workload:
    setup: Callable[[], None]
    stages: list[Stage]
    device: str = "cpu"
    dtype: str = "float32"
    params: dict = field(default_factory=dict)


def load_callable(spec: str) -> Callable[..., Workload]:
    """Import ``package.module:function``; raise WorkloadError naming the spec and the fix."""
    if ":" not in spec:
        raise WorkloadError(f"workload callable {spec!r} is not of the form 'package.module:function'")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an ImportError, or any error raised while the module imports
        raise WorkloadError(
            f"workload callable {spec!r}: importing module {module_name!r} failed: {exc!r}. "
            "Check the module name and that it is importable from the workflow's Python (PYTHONPATH)."
        ) from exc
    try:
        fn = getattr(module, attr)
    except AttributeError as exc:
        raise WorkloadError(f"workload callable {spec!r}: module {module_name!r} has no attribute {attr!r}") from exc
    if not callable(fn):
        raise WorkloadError(f"workload callable {spec!r} is not callable")
    return fn


def build_workload(spec: str, args: dict) -> Workload:
    fn = load_callable(spec)
    try:
        workload = fn(**args)
    except Exception as exc:
        raise WorkloadError(f"workload callable {spec!r} raised while building with {args}: {exc!r}") from exc
    if not isinstance(workload, Workload) or not workload.stages:
        raise WorkloadError(
            f"workload callable {spec!r} returned {type(workload).__name__}, not a nsightflow.harness.Workload "
            "with at least one Stage"
        )
    return workload


def _sync(device: str) -> None:
    """Wait for the GPU, so a range's wall time covers its kernels. Done whenever CUDA is in use, even
    if the workload declared another device or never synchronizes itself."""
    import torch

    if device.startswith("cuda") or (torch.cuda.is_available() and torch.cuda.is_initialized()):
        torch.cuda.synchronize()


def _run_all(workload: Workload, annotate: Callable | None) -> dict[str, list[float]]:
    """Run setup and every stage step once; return each step's wall time in seconds."""
    _setup(workload)
    times: dict[str, list[float]] = {}
    for stage in workload.stages:
        for step in range(stage.repeats):
            start = time.perf_counter()
            if annotate is None:
                _call(stage, step)
                _sync(workload.device)
            else:
                with annotate(stage.name, step):
                    _call(stage, step)
                    _sync(workload.device)
            times.setdefault(stage.name, []).append(time.perf_counter() - start)
    return times


def _setup(workload: Workload) -> None:
    try:
        workload.setup()
    except Exception as exc:
        raise WorkloadError(f"the workload's setup raised: {exc!r}") from exc
    _sync(workload.device)


def _call(stage: Stage, step: int) -> None:
    try:
        stage.fn(step)
    except Exception as exc:
        raise WorkloadError(f"stage {stage.name!r} raised at step {step}: {exc!r}. Run the workload once "
                            "outside nsightflow to debug it; nothing was measured.") from exc


def run_profiled(workload: Workload, domain: str = DEFAULT_DOMAIN, warmup: int = 1) -> dict[str, list[float]]:
    """Warm up outside any range, then run every stage step inside its NVTX range."""
    import nvtx

    for _ in range(warmup):
        _run_all(workload, None)

    def annotate(name: str, step: int):
        return nvtx.annotate(message=name, domain=domain, payload=step)

    return _run_all(workload, annotate)


def trace_label(workload: Workload, name: str) -> str:
    """The stage's label in a torch trace: its name, or ``stage<i>`` when the name holds characters that
    torch's Chrome-trace exporter writes unescaped (quotes, backslashes, control characters: seen with
    torch 2.13, the exported JSON no longer parses). ``trace_labels`` in the run record maps back."""
    if any(c in name for c in '"\\') or any(ord(c) < 32 for c in name):
        return f"stage{[s.name for s in workload.stages].index(name)}"
    return name


def run_torch_profiled(workload: Workload, trace: Path, domain: str = DEFAULT_DOMAIN,
                       warmup: int = 1) -> dict[str, list[float]]:
    """Warm up, then run every stage step under torch.profiler inside ``record_function('domain:stage')``.

    The trace (Chrome/Perfetto JSON) records operators on the CPU and, on a GPU, the CUDA kernels
    through CUPTI; ``nsightflow.torchprof`` turns it into the same tables as the nsys path.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(warmup):
        _run_all(workload, None)
    activities = [ProfilerActivity.CPU]
    if workload.device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)

    def annotate(name: str, step: int):
        return record_function(f"{domain}:{trace_label(workload, name)}")

    with profile(activities=activities) as prof:
        times = _run_all(workload, annotate)
    trace.parent.mkdir(parents=True, exist_ok=True)
    tmp = trace.with_name(trace.name + ".tmp")
    prof.export_chrome_trace(str(tmp))
    tmp.replace(trace)
    return times


def environment(workload: Workload) -> dict:
    """Versions and device facts for the run's manifest."""
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": workload.device,
        "device_name": platform.processor() or platform.machine(),
        "cuda": torch.version.cuda,
    }
    if workload.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(workload.device))
        env.update(
            device_name=props.name,
            sm_count=props.multi_processor_count,
            compute_capability=f"{props.major}.{props.minor}",
            memory_bytes=props.total_memory,
        )
    return env


_SDPA_CAUSAL_ARG = {
    # op name -> positional index of is_causal in its aten schema
    "_scaled_dot_product_flash_attention": 4,
    "_scaled_dot_product_flash_attention_for_cpu": 4,
    "_scaled_dot_product_efficient_attention": 6,
    "_scaled_dot_product_cudnn_attention": 6,
}


_GATHER_OPS = {"embedding", "index_select", "gather", "take", "index", "embedding_bag"}


def _moved_bytes(inputs: list, output, gathers: bool = False) -> int:
    """Bytes an operator touches: each distinct input tensor once, plus new outputs.

    Outputs that alias an input (views, in-place results) add nothing; a lookup (``gathers``)
    reads only as many table bytes as it returns. Re-reads are not counted, so this is a lower
    bound on what the operators must touch; DRAM traffic itself can be lower when an
    intermediate stays in cache.
    """
    import torch

    def tensors(x):
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (list, tuple)):
            for y in x:
                yield from tensors(y)

    seen: set[tuple[int, int]] = set()
    total = 0
    ins = list(tensors(inputs))
    outs = list(tensors(output))
    if gathers and ins and outs:
        # A lookup reads only the rows it returns, not the whole table.
        table = ins[0]
        seen.add((table.untyped_storage().data_ptr(), table.storage_offset()))
        total += min(table.numel() * table.element_size(), sum(t.numel() * t.element_size() for t in outs))
    in_storage = {t.untyped_storage().data_ptr() for t in ins if t.device.type != "meta"}
    for t in ins:
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    for t in outs:
        if t.untyped_storage().data_ptr() in in_storage:
            continue  # a view or an in-place result: its bytes were counted as an input
        total += t.numel() * t.element_size()
    return total


def count_flops(workload: Workload) -> dict:
    """FLOPs per stage from torch.utils.flop_counter.FlopCounterMode, with causal attention noted,
    and a lower bound on the bytes each stage's operators read and write.

    FlopCounterMode counts causal attention as full attention; the attention calls seen with
    ``is_causal`` are recorded so that the causal-adjusted count (only the unmasked half of
    the score and value products) can be stated beside it.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class SdpaLog(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[dict] = []
            self.bytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if not getattr(func, "is_view", False):  # views move no data
                self.bytes += _moved_bytes(list(args) + list(kwargs.values()), out,
                                           gathers=func.overloadpacket.__name__ in _GATHER_OPS)
            name = func.overloadpacket.__name__
            if name in _SDPA_CAUSAL_ARG:
                idx = _SDPA_CAUSAL_ARG[name]
                causal = kwargs.get("is_causal", args[idx] if len(args) > idx else False)
                q, k = args[0], args[1]
                b, h, sq, d = q.shape
                sk = k.shape[-2]
                dv = args[2].shape[-1]
                self.calls.append(dict(op=name, causal=bool(causal), b=b, h=h, sq=sq, sk=sk, d=d, dv=dv))
            return out

    _setup(workload)
    out: dict = {"stages": {}}
    for stage in workload.stages:
        total = 0
        attn_full = 0
        causal_saved = 0
        moved = 0
        by_op: dict[str, int] = {}
        for step in range(stage.repeats):
            log = SdpaLog()
            counter = FlopCounterMode(display=False)
            with counter, log, torch.no_grad():
                _call(stage, step)
            total += counter.get_total_flops()
            moved += log.bytes
            for op, n in counter.get_flop_counts().get("Global", {}).items():
                key = str(op)
                by_op[key] = by_op.get(key, 0) + int(n)
            for c in log.calls:
                full = 2 * c["b"] * c["h"] * c["sq"] * c["sk"] * (c["d"] + c["dv"])
                attn_full += full
                if c["causal"]:
                    # Query i sees keys 0..i (top-left aligned): (sq+1)/2 keys on average of sk.
                    kept = full * (c["sq"] + 1) / (2 * c["sk"])
                    causal_saved += full - kept
        if not any(any(name in op for name in _SDPA_CAUSAL_ARG) for op in by_op):
            # FlopCounterMode did not count the attention op itself (e.g. the CPU math path
            # decomposes it into counted matmuls over the full score matrix): nothing to adjust.
            causal_saved = 0
        out["stages"][stage.name] = {
            "flops": int(total),
            "attention_flops_full": int(attn_full),
            "causal_masked_flops": int(round(causal_saved)),
            "flops_causal_adjusted": int(round(total - causal_saved)),
            "bytes_lower_bound": int(moved),
            "repeats": stage.repeats,
            "by_op": by_op,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a workload under NVTX ranges, or count its FLOPs.")
    parser.add_argument("--callable", dest="spec", default="nsightflow.decoder:build")
    parser.add_argument("--args", default="{}", help="JSON object of keyword arguments for the callable")
    parser.add_argument("--domain", default=DEFAULT_DOMAIN)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--mode", choices=["profile", "torch", "flops"], default="profile",
                        help="profile: NVTX ranges for nsys/ncu; torch: torch.profiler trace to --trace; flops: counts")
    parser.add_argument("--trace", type=Path, help="Chrome trace path for --mode torch")
    parser.add_argument("--out", type=Path, help="write the run's JSON (manifest or FLOP counts) here")
    ns = parser.parse_args(argv)
    try:
        args = json.loads(ns.args)
        workload = build_workload(ns.spec, args)
        if ns.mode == "profile":
            result = {"stage_wall_s": run_profiled(workload, ns.domain, ns.warmup)}
        elif ns.mode == "torch":
            if ns.trace is None:
                parser.error("--mode torch needs --trace PATH")
            result = {"stage_wall_s": run_torch_profiled(workload, ns.trace, ns.domain, ns.warmup)}
        else:
            result = count_flops(workload)
    except WorkloadError as exc:
        print(f"nsightflow: {exc}", file=sys.stderr)
        return 2
    result.update(
        callable=ns.spec, args=args, domain=ns.domain, params=workload.params,
        stages=result.get("stages", {}) if ns.mode == "flops" else [
            {"name": s.name, "repeats": s.repeats} for s in workload.stages
        ],
        trace_labels={trace_label(workload, s.name): s.name for s in workload.stages},
        environment=environment(workload),
    )
    if ns.out:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = ns.out.with_suffix(ns.out.suffix + ".tmp")
        tmp.write_text(json.dumps(result, indent=2, default=str))
        tmp.replace(ns.out)
    return 0


if __name__ == "__main__":
    # Run the copy imported as nsightflow.harness, so that the Workload class a user's callable
    # returns is the same class checked here (not a second one defined in __main__).
    from nsightflow.harness import main as _main

    sys.exit(_main())

"""Nsight Compute: the capture command, its diagnosis, and raw-CSV parsing.

Findings this module is built on (ncu 2025.3.1, see ../shared/gpu-host/README.md):
- ``--profile-from-start off`` profiles every kernel launched between ``cudaProfilerStart`` and
  ``cudaProfilerStop``, from any thread and inside CUDA-graph replays: the harness opens those
  windows around exactly the launches a capture plan names (nsightflow.probe, nsightflow.plan),
  so no NVTX or kernel-name filter is needed (and none can miss);
- "No kernels were profiled" exits 0: only the output tells;
- ncu prints shortened kernel names (``at::native::`` and ``(int)`` casts dropped): results are
  joined to the timeline by order, with grid, block and a name key checked (nsightflow.matching);
- range replay refuses SASS instruction counts: range captures use the hardware counters only.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

# What config `ncu` allows (workflow/schemas/config.schema.yaml holds the defaults).
ReplayMode = Literal["kernel", "application", "range", "app-range"]
ClockControl = Literal["none", "base"]
CacheControl = Literal["all", "none"]

# Metrics behind the default report: time, clocks, FLOPs by precision, bytes per memory level,
# and the peaks that turn them into utilisation. Counts do not depend on clocks; peaks are
# per-cycle rates multiplied by the clock measured in the same result.
TENSOR_FLOP_METRICS = {
    "bf16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "fp16": "sm__ops_path_tensor_src_fp16.sum",
    "tf32": "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "fp8": "sm__ops_path_tensor_src_fp8.sum",
    "fp64_tensor": "sm__ops_path_tensor_src_fp64.sum",
}
SASS_FLOP_METRICS = {  # (metric, FLOPs per thread instruction)
    "fp32": [
        ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", 1),
        ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", 1),
        ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", 2),
    ],
    "fp64": [
        ("sm__sass_thread_inst_executed_op_dadd_pred_on.sum", 1),
        ("sm__sass_thread_inst_executed_op_dmul_pred_on.sum", 1),
        ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum", 2),
    ],
    "fp16": [
        ("sm__sass_thread_inst_executed_op_hadd_pred_on.sum", 2),  # half2: two lanes
        ("sm__sass_thread_inst_executed_op_hmul_pred_on.sum", 2),
        ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum", 4),
    ],
}
BYTE_METRICS = {
    "dram_read": "dram__bytes_read.sum",
    "dram_write": "dram__bytes_write.sum",
    "l2": "lts__t_bytes.sum",
    "l1": "l1tex__t_bytes.sum",
}
PEAK_METRICS = {
    "bf16_dense_per_cycle": "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained",
    "ffma_per_cycle": "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
    "dram_bytes_per_cycle": "dram__bytes.sum.peak_sustained",
    "l2_bytes_per_cycle": "lts__t_bytes.sum.peak_sustained",
    "l1_bytes_per_cycle": "l1tex__t_bytes.sum.peak_sustained",
}
TIME_METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "sm_hz": "sm__cycles_elapsed.avg.per_second",
    "dram_hz": "dram__cycles_elapsed.avg.per_second",
}
DEFAULT_METRICS = (
    list(TIME_METRICS.values())
    + list(TENSOR_FLOP_METRICS.values())
    + [m for pairs in SASS_FLOP_METRICS.values() for m, _ in pairs]
    + list(BYTE_METRICS.values())
    + list(PEAK_METRICS.values())
)
# Each tensor-precision counter costs a replay pass of its own (H200: 6 passes with all five, 3 with one), but
# a workload's declared dtype does not say which precisions its kernels use, and no all-precision tensor
# counter tells them apart on Hopper (sm__inst_executed_pipe_tensor also counts HFMA2 of elementwise
# kernels): the default collects every precision.


class CaptureError(RuntimeError):
    """An ncu capture that profiled nothing, too little, or was refused; the message is the diagnosis."""


RANGE_REPLAY_MODES = ("range", "app-range")  # one result per window


def resolve_metrics(spec, extra: list[str], ranges: bool = False) -> list[str]:
    """The metrics of a capture: config ``ncu.metrics`` ('default': DEFAULT_METRICS) plus ``extra_metrics``; for a
    range capture without SASS instruction counts, which range replay refuses."""
    base = DEFAULT_METRICS if spec == "default" else list(spec)
    out = list(dict.fromkeys(base + list(extra)))
    return [m for m in out if "__sass_" not in m] if ranges else out


def capture_argv(
    ncu: str,
    out_base: str | Path,
    program: list[str],
    *,
    metrics: list[str] | None = None,
    sections: list[str] | None = None,
    replay_mode: ReplayMode,
    clock_control: ClockControl,
    cache_control: CacheControl,
) -> list[str]:
    """The ncu command line of a windowed capture (an argv list: no shell ever sees a name from the config).

    ``--profile-from-start off``: nothing is profiled until the program opens a window. Range replay refuses
    that option (ncu 2025.3.1); there the program's start/stop pairs are the ranges themselves.
    """
    start = [] if replay_mode in RANGE_REPLAY_MODES else ["--profile-from-start", "off"]
    argv = [
        ncu,
        "--force-overwrite",
        "--export",
        str(out_base),
        "--nvtx",
        *start,
        f"--replay-mode={replay_mode}",
        f"--clock-control={clock_control}",
        f"--cache-control={cache_control}",
    ]
    for section in sections or []:
        argv += ["--section", section]
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    return argv + list(program)


def export_argv(ncu: str, report: str | Path) -> list[str]:
    """Raw page as CSV in base units (bytes, ns), one row per profiled result."""
    return [ncu, "--import", str(report), "--page", "raw", "--csv", "--print-units", "base"]


_REFUSALS = [
    (
        "Unsupported API during capture",
        "range replay refused an API the workload calls inside the range "
        "(PyTorch calls cuKernelSetAttribute): use ncu.ranges 'app-range'",
    ),
    (
        "ERR_NVGPUCTRPERM",
        "no permission to read GPU performance counters: run as root or set "
        "NVreg_RestrictProfilingToAdminUsers=0 for the nvidia kernel module",
    ),
    (
        "not supported in range replay",
        "a metric (SASS instruction counts) is not collectable in range replay: "
        "range captures must use hardware counters only",
    ),
    ("Failed to find metric", "a requested metric does not exist on this GPU: check `ncu --query-metrics`"),
]


_PROFILED = re.compile(r'^==PROF== Profiling ".*" - (\d+):')


def profiled_count(log_text: str) -> int:
    """Results ncu says it profiled: distinct ids of ``==PROF== Profiling "name" - ID:`` lines (application
    replay prints a result once per pass, each time in a new run of the program)."""
    ids = {m.group(1) for m in map(_PROFILED.match, log_text.splitlines()) if m}
    plain = sum(1 for line in log_text.splitlines() if line.startswith("==PROF== Profiling"))
    return len(ids) if ids else plain


def warnings(log_text: str) -> list[str]:
    """ncu's own warnings and errors, one line each."""
    return [line.strip() for line in log_text.splitlines() if line.startswith(("==WARNING==", "==ERROR=="))]


def check_capture(log_text: str, returncode: int, *, what: str, expected: int | None = None) -> None:
    """Raise CaptureError with a diagnosis when ncu was refused, profiled nothing (which exits 0), or
    profiled another number of launches than the plan names."""
    causes = [fix for needle, fix in _REFUSALS if needle in log_text]
    empty = "No kernels were profiled" in log_text or "No ranges were profiled" in log_text
    got = profiled_count(log_text)
    wrong = expected is not None and not empty and returncode == 0 and not causes and got != expected
    if returncode == 0 and not empty and not causes and not wrong:
        return
    if wrong:
        lines = [
            f"ncu profiled {got} launches for {what}, the plan names {expected}: a capture that does not match "
            "its plan would be scaled wrongly, so it is refused.",
            "likely causes: the program launched other kernels under ncu than under nsys (non-deterministic "
            "dispatch, autotuning that differs run to run: warm up more), or another thread launched kernels "
            "while a window was open; ncu.capture 'every_launch' profiles whole steps instead.",
        ]
    else:
        lines = [f"ncu captured nothing for {what} (exit code {returncode})."]
    lines += [f"cause: {c}" for c in causes]
    if empty:
        lines.append(
            "ncu said: " + ("No kernels were profiled" if "No kernels" in log_text else "No ranges were profiled")
        )
        lines.append(
            "the program never opened a profiler window: it must run nsightflow's harness with --windows "
            "(cudaProfilerStart/Stop around the planned launches), under ncu --profile-from-start off"
        )
    tail = "\n".join(log_text.strip().splitlines()[-15:])
    raise CaptureError("\n".join(lines) + f"\n--- last lines of ncu output ---\n{tail}")


_NVTX_ENTRY = re.compile(
    r'"(?P<domain>[^"]*?):(?P<range>[^"]*):(?P<pltype>[^:"]*):(?P<plvalue>[^:"]*):'
    r'(?P<clrtype>[^:"]*):(?P<color>[^:"]*):(?P<msgtype>[^:"]*):(?P=range)"'
)


def parse_nvtx(cell: str) -> list[dict]:
    """The push/pop stack of an ncu NVTX cell, outermost first.

    A cell reads like ``642  "nsightflow:decode:Int64:3:RGB:0xff:REGISTERED:decode" ``:
    thread id, then per range domain:name:payload type:payload:colour type:colour:message type:name.
    """
    out = []
    for m in _NVTX_ENTRY.finditer(cell or ""):
        payload = m.group("plvalue")
        domain = m.group("domain")
        out.append(
            {
                "domain": "" if domain == "<default domain>" else domain,
                "range": m.group("range"),
                "payload": int(payload) if re.fullmatch(r"-?\d+", payload or "") else None,
            }
        )
    return out


def _number(cell: str) -> float:
    cell = (cell or "").strip().replace(",", "")
    if cell in ("", "n/a", "no data", "N/A", "(!) n/a"):
        return np.nan
    try:
        return float(cell)
    except ValueError:
        return np.nan


_PREFIX = {"n": -9, "u": -6, "m": -3, "": 0, "K": 3, "M": 6, "G": 9, "T": 12, "P": 15}  # powers of ten
_UNIT_BASES = {
    "byte": 0,
    "second": 0,
    "s": 0,
    "ns": -9,
    "hz": 0,
    "inst": 0,
    "warp": 0,
    "cycle": 0,
    "thread": 0,
    "sector": 0,
    "request": 0,
    "block": 0,
    "register": 0,
    "wavefront": 0,
}


def _unit_exponent(unit: str) -> tuple[int, bool] | None:
    """(power of ten to SI base units, is a plain time), exact integers; None when not understood."""
    unit = unit.strip()
    if unit in ("", "%"):
        return 0, False
    if "/" in unit:
        num, _, den = unit.partition("/")
        a, b = _unit_exponent(num), _unit_exponent(den)
        return None if a is None or b is None else (a[0] - b[0], False)
    for base in sorted(_UNIT_BASES, key=len, reverse=True):
        prefix = unit[: len(unit) - len(base)]
        if unit.lower().endswith(base) and prefix in _PREFIX:
            return _PREFIX[prefix] + _UNIT_BASES[base], base in ("second", "s", "ns")
    return None


def unit_factor(unit: str) -> tuple[float, bool] | None:
    """(factor to SI base units, is a plain time) for an ncu unit such as 'Mbyte', 'usecond', 'Ghz', 'byte/cycle'.

    ``None`` when the unit is not understood. Prefixes are decimal (K = 1e3), as ncu's auto units print.
    """
    exp = _unit_exponent(unit)
    return None if exp is None else (10.0 ** exp[0], exp[1])


def parse_raw_csv(source: str | Path) -> tuple[pd.DataFrame, dict[str, str]]:
    """Parse ``ncu --import R --page raw --csv`` output: (one row per result, units per column as printed).

    Metric columns (names with ``__``) become floats in base units (bytes, ns, hz: auto-scaled
    units such as ``Mbyte`` or ``usecond`` are converted) with thousands separators removed and
    ``n/a``/``no data`` as NaN; the NVTX push/pop column becomes ``nvtx_stack`` (every range, outermost
    first) and ``nvtx_domain``, ``nvtx_range`` and ``nvtx_payload`` of the innermost range.
    """
    text = Path(source).read_text() if isinstance(source, Path) or "\n" not in str(source) else str(source)
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if r and not (len(r) == 1 and r[0].startswith("=="))]
    if len(rows) < 2 or "Kernel Name" not in rows[0] or "ID" not in rows[0]:
        raise ValueError(
            f"{source if isinstance(source, Path) else 'input'}: not an ncu raw CSV export "
            "(expected a header with 'ID' and 'Kernel Name', then a units row); "
            "make it with: ncu --import R.ncu-rep --page raw --csv --print-units base"
        )
    header, units = rows[0], rows[1]
    if len(units) != len(header):
        raise ValueError("ncu raw CSV: the units row does not match the header (truncated file?)")
    body = [r for r in rows[2:] if len(r) == len(header)]
    if len(body) != len(rows) - 2:
        raise ValueError(
            f"ncu raw CSV: {len(rows) - 2 - len(body)} rows have the wrong number of cells (truncated file?)"
        )
    columns = {}
    for i, col in enumerate(header):
        cells = [r[i] for r in body]
        if "__" not in col:
            columns[col] = cells
            continue
        # Auto units (no --print-units base) scale per column: bring every metric to bytes, ns, hz, ...
        exp = _unit_exponent(units[i])
        if exp is None:
            if col in DEFAULT_METRICS:
                raise ValueError(
                    f"ncu raw CSV: column {col!r} has unit {units[i]!r}, which nsightflow does not know; "
                    "export with: ncu --import R.ncu-rep --page raw --csv --print-units base"
                )
            exp = (0, False)  # a column nsightflow does not read (e.g. launch__* counts of 'cluster'): as printed
        scale = 10.0 ** (exp[0] + (9 if exp[1] else 0))  # plain times in ns
        columns[col] = [_number(v) * scale for v in cells]
    nvtx_col = next((c for c in header if "Push/Pop_Range" in c), None)
    stacks = [parse_nvtx(v) for v in columns[nvtx_col]] if nvtx_col else [[] for _ in body]
    columns["nvtx_stack"] = stacks
    columns["nvtx_domain"] = [s[-1]["domain"] if s else None for s in stacks]
    columns["nvtx_range"] = [s[-1]["range"] if s else None for s in stacks]
    columns["nvtx_payload"] = [s[-1]["payload"] if s else None for s in stacks]
    df = pd.DataFrame(columns)
    df["ID"] = df["ID"].astype(int)
    return df, dict(zip(header, units, strict=True))

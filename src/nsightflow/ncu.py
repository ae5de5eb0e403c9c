"""Nsight Compute: filters that really match, sampling offsets, command lines, raw-CSV parsing.

Findings this module is built on (ncu 2025.3.1, see ../shared/gpu-host/README.md):
- ``--nvtx-include "D@R/"`` splits at the first ``@``: a range name containing ``@`` must go
  through ``regex:D@...`` with the ``@`` written as ``\\x40``.
- ``--launch-skip/--launch-count`` count only launches that pass the NVTX and kernel filters.
- ncu prints shortened kernel names (``at::native::`` and ``(int)`` casts dropped). An alternation
  of nsys's demangled names under ``--kernel-name-base demangled`` missed cuBLASLt's ``nvjet_*``
  GEMMs, so the kernel filter matches the mangled (linker) names that nsys also records: they are
  unique per template instantiation, plain identifiers, and the same in both tools.
- "No kernels were profiled" exits 0: only the output tells.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

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
    "fp32": [("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", 1),
             ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", 1),
             ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", 2)],
    "fp64": [("sm__sass_thread_inst_executed_op_dadd_pred_on.sum", 1),
             ("sm__sass_thread_inst_executed_op_dmul_pred_on.sum", 1),
             ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum", 2)],
    "fp16": [("sm__sass_thread_inst_executed_op_hadd_pred_on.sum", 2),  # half2: two lanes
             ("sm__sass_thread_inst_executed_op_hmul_pred_on.sum", 2),
             ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum", 4)],
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
    list(TIME_METRICS.values()) + list(TENSOR_FLOP_METRICS.values())
    + [m for pairs in SASS_FLOP_METRICS.values() for m, _ in pairs]
    + list(BYTE_METRICS.values()) + list(PEAK_METRICS.values())
)

_REGEX_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}])")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


class CaptureError(RuntimeError):
    """An ncu capture that profiled nothing or was refused; the message is the diagnosis."""


def escape_regex(text: str) -> str:
    """Escape ``text`` for ncu's (ECMAScript) regex, with ``@`` and ``/`` as hex escapes.

    ``@`` and ``/`` carry meaning in ``--nvtx-include`` (domain and range-path separators),
    so they must not appear literally even inside a regex.
    """
    return _REGEX_SPECIAL.sub(r"\\\1", text).replace("@", r"\x40").replace("/", r"\x2f")


def nvtx_include(domain: str, name: str) -> str:
    """An ``--nvtx-include`` expression matching push/pop range ``name`` in ``domain``.

    Plain names use ncu's literal form ``D@R/``; any other name (``@``, ``/``, spaces,
    punctuation) uses ``regex:D@^...$/`` with the name escaped. ``domain`` '' is the default domain.
    """
    if _PLAIN_NAME.match(name) and (not domain or _PLAIN_NAME.match(domain)):
        return f"{domain}@{name}/" if domain else f"{name}/"
    if domain and not _PLAIN_NAME.match(domain):
        raise CaptureError(
            f"NVTX domain {domain!r} contains characters that ncu's --nvtx-include cannot express "
            "(seen on ncu 2025.3.1: a domain with a space matched nothing in any form); "
            "use a domain of letters, digits, '_', '.', '-'"
        )
    body = "^" + escape_regex(name) + "$"
    return f"regex:{domain}@{body}/" if domain else f"regex:{body}/"


def kernel_name_filter(names: list[str]) -> str:
    """``--kernel-name`` value matching exactly these names (mangled names, with --kernel-name-base mangled)."""
    if not names:
        raise ValueError("kernel_name_filter needs at least one kernel name")
    return "regex:^(" + "|".join(escape_regex(n) for n in sorted(set(names))) + ")$"


def resolve_steps(spec: list, repeats: int) -> list[int]:
    """Decode steps to sample: items 'first', 'middle', 'last', 'every:K', or step indices."""
    steps: set[int] = set()
    for item in spec:
        if isinstance(item, int) and not isinstance(item, bool):
            if not 0 <= item < repeats:
                raise ValueError(f"sample step {item} is outside 0..{repeats - 1}")
            steps.add(item)
        elif item == "first":
            steps.add(0)
        elif item == "middle":
            steps.add((repeats - 1) // 2)
        elif item == "last":
            steps.add(repeats - 1)
        elif isinstance(item, str) and item.startswith("every:") and item[6:].isdigit() and int(item[6:]) > 0:
            steps.update(range(0, repeats, int(item[6:])))
        else:
            raise ValueError(f"sample step {item!r}: use 'first', 'middle', 'last', 'every:K' or a step index")
    return sorted(steps)


@dataclass
class CapturePlan:
    """One ncu run: the launches of ``kernels`` inside one stage step (or a whole stage)."""

    capture_id: str
    domain: str
    stage: str
    steps: list[int]
    kernels: list[str]  # mangled names for the kernel filter; empty: every launch in the stage step
    launch_skip: int
    launch_count: int
    expected: list[dict] = field(default_factory=list)  # timeline launches it should profile, in order


def plan_captures(launches: pd.DataFrame, selected: pd.DataFrame, sample_steps: list,
                  repeated_threshold: int = 2) -> list[CapturePlan]:
    """One plan per stage (a stage run once) or per sampled step (a stage repeated, e.g. decode).

    With the NVTX filter on the stage and the kernel-name filter on its selected kernels,
    ncu counts only matching launches, so the skip for step s is the number of matching
    launches in the steps before s, and the count the number in step s: read off the timeline.
    """
    plans: list[CapturePlan] = []
    for (domain, stage), sel in selected.groupby(["domain", "stage"], sort=True):
        seq = launches[(launches["domain"] == domain) & (launches["stage"] == stage)]
        match = seq[seq["kernel"].isin(set(sel["kernel"]))].sort_values(["range_index", "seq"])
        names = set(match["mangled"])
        n_ranges = int(seq["range_index"].max()) + 1 if len(seq) else 0
        if n_ranges == 0 or match.empty:
            continue
        if n_ranges < repeated_threshold:
            groups = [(list(range(n_ranges)), match)]
        else:
            groups = [([s], match[match["range_index"] == s]) for s in resolve_steps(sample_steps, n_ranges)]
        for steps, rows in groups:
            skip = int((match["range_index"] < min(steps)).sum())
            tag = stage if len(groups) == 1 and n_ranges < repeated_threshold else f"{stage}.step{steps[0]}"
            plans.append(CapturePlan(
                capture_id=safe_id(tag), domain=domain, stage=stage, steps=steps, kernels=sorted(names),
                launch_skip=skip, launch_count=len(rows),
                expected=rows[["kernel", "grid", "block", "step", "duration_ns"]].to_dict("records"),
            ))
    return plans


def safe_id(text: str) -> str:
    """A file-name-safe, stable id for a capture."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "capture"


def capture_argv(ncu: str, out_base: str | Path, program: list[str], *, nvtx_expr: str | None,
                 kernels: list[str] | None, launch_skip: int = 0, launch_count: int | None = None,
                 metrics: list[str] | None = None, sections: list[str] | None = None,
                 replay_mode: str = "kernel", clock_control: str = "none", cache_control: str = "all") -> list[str]:
    """The ncu command line (an argv list: no shell ever sees a name from the config)."""
    argv = [ncu, "--force-overwrite", "--export", str(out_base), "--nvtx",
            f"--replay-mode={replay_mode}", f"--clock-control={clock_control}", f"--cache-control={cache_control}"]
    if nvtx_expr:
        argv += ["--nvtx-include", nvtx_expr]
    if kernels and replay_mode in ("kernel", "application"):
        argv += ["--kernel-name-base", "mangled", "--kernel-name", kernel_name_filter(kernels)]
    if launch_skip:
        argv += ["--launch-skip", str(launch_skip)]
    if launch_count is not None:
        argv += ["--launch-count", str(launch_count)]
    for section in sections or []:
        argv += ["--section", section]
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    return argv + list(program)


def export_argv(ncu: str, report: str | Path) -> list[str]:
    """Raw page as CSV in base units (bytes, ns), one row per profiled result."""
    return [ncu, "--import", str(report), "--page", "raw", "--csv", "--print-units", "base"]


_REFUSALS = [
    ("Unsupported API during capture", "range replay refused an API the workload calls inside the range "
     "(PyTorch calls cuKernelSetAttribute): use replay_mode 'app-range' or 'kernel'"),
    ("ERR_NVGPUCTRPERM", "no permission to read GPU performance counters: run as root or set "
     "NVreg_RestrictProfilingToAdminUsers=0 for the nvidia kernel module"),
    ("not supported in range replay", "a metric (SASS instruction counts) is not collectable in range replay: "
     "use replay_mode 'kernel' or drop the SASS metrics"),
    ("Failed to find metric", "a requested metric does not exist on this GPU: check `ncu --query-metrics`"),
]


# Next replay mode to try when one is refused. app-range does capture a PyTorch decode step (seen on the
# H200), but gives one result per range, which nsightflow cannot join per kernel: the chain ends in kernel.
FALLBACK = {"range": "kernel", "app-range": "kernel", "application": "kernel"}


def profiled_count(log_text: str) -> int:
    """Kernels (or ranges) ncu says it profiled: one ``==PROF== Profiling`` line each."""
    return sum(1 for line in log_text.splitlines() if line.startswith("==PROF== Profiling"))


def warnings(log_text: str) -> list[str]:
    """ncu's own warnings and errors, one line each."""
    return [line.strip() for line in log_text.splitlines() if line.startswith(("==WARNING==", "==ERROR=="))]


def check_capture(log_text: str, returncode: int, *, what: str, ranges_seen: list[str],
                  domain: str = "", stage: str = "", expected: int | None = None) -> None:
    """Raise CaptureError with a diagnosis when ncu was refused, profiled nothing (which exits 0),
    or profiled fewer launches than the timeline planned.

    The diagnosis names the expression used, the ranges the timeline saw, the known cause that
    applies and, where the stage was seen under another domain or name, the corrected expression.
    """
    causes = [fix for needle, fix in _REFUSALS if needle in log_text]
    empty = "No kernels were profiled" in log_text or "No ranges were profiled" in log_text
    got = profiled_count(log_text)
    partial = expected is not None and not empty and returncode == 0 and not causes and got < expected
    if returncode == 0 and not empty and not causes and not partial:
        return
    seen = ", ".join(ranges_seen) or "none"
    if partial:
        lines = [f"ncu profiled {got} of the {expected} launches planned for {what}: a partial capture would be "
                 "scaled wrongly, so it is refused.",
                 "likely causes: the program launched different kernels under ncu than under nsys (non-deterministic "
                 "dispatch, autotuning that differs run to run: warm up more), or the kernel filter missed names "
                 "(set ncu.kernel_filter false to take every launch of the step)."]
    else:
        lines = [f"ncu captured nothing for {what} (exit code {returncode})."]
    lines += [f"cause: {c}" for c in causes]
    if empty:
        lines.append("ncu said: " + ("No kernels were profiled" if "No kernels" in log_text else "No ranges were profiled"))
        lines.append(f"NVTX ranges the timeline saw (domain:name): {seen}")
        same_name = [r for r in ranges_seen if r.split(":", 1)[-1] == stage and r != f"{domain}:{stage}"]
        if stage and not any(r == f"{domain}:{stage}" for r in ranges_seen):
            lines.append(f"the timeline has no range {stage!r} in domain {domain!r}"
                         + (f"; it has {same_name}: corrected expression {nvtx_include(*same_name[0].split(':', 1))!r}"
                            if same_name else ""))
        lines.append("known causes: the range must be push/pop (nvtx.annotate or range_push/pop, not start/end) in "
                     "the domain named; a range name with '@' needs the regex form nsightflow builds; CUDA "
                     "initialisation inside the range; the kernel-name filter must match the mangled names nsys "
                     "recorded.")
    tail = "\n".join(log_text.strip().splitlines()[-15:])
    raise CaptureError("\n".join(lines) + f"\n--- last lines of ncu output ---\n{tail}")


_NVTX_ENTRY = re.compile(r'"(?P<domain>[^"]*?):(?P<range>[^"]*):(?P<pltype>[^:"]*):(?P<plvalue>[^:"]*):'
                         r'(?P<clrtype>[^:"]*):(?P<color>[^:"]*):(?P<msgtype>[^:"]*):(?P=range)"')


def parse_nvtx(cell: str) -> list[dict]:
    """The push/pop stack of an ncu NVTX cell, outermost first.

    A cell reads like ``642  "nsightflow:decode:Int64:3:RGB:0xff:REGISTERED:decode" ``:
    thread id, then per range domain:name:payload type:payload:colour type:colour:message type:name.
    """
    out = []
    for m in _NVTX_ENTRY.finditer(cell or ""):
        payload = m.group("plvalue")
        domain = m.group("domain")
        out.append({
            "domain": "" if domain == "<default domain>" else domain,
            "range": m.group("range"),
            "payload": int(payload) if re.fullmatch(r"-?\d+", payload or "") else None,
        })
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
_UNIT_BASES = {"byte": 0, "second": 0, "s": 0, "ns": -9, "hz": 0, "inst": 0, "warp": 0, "cycle": 0,
               "thread": 0, "sector": 0, "request": 0, "block": 0, "register": 0, "wavefront": 0}


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
    ``n/a``/``no data`` as NaN; the NVTX push/pop column becomes ``nvtx_domain``,
    ``nvtx_range`` and ``nvtx_payload`` of the innermost range.
    """
    text = Path(source).read_text() if isinstance(source, Path) or "\n" not in str(source) else str(source)
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if r and not (len(r) == 1 and r[0].startswith("=="))]
    if len(rows) < 2 or "Kernel Name" not in rows[0] or "ID" not in rows[0]:
        raise ValueError(f"{source if isinstance(source, Path) else 'input'}: not an ncu raw CSV export "
                         "(expected a header with 'ID' and 'Kernel Name', then a units row); "
                         "make it with: ncu --import R.ncu-rep --page raw --csv --print-units base")
    header, units = rows[0], rows[1]
    if len(units) != len(header):
        raise ValueError("ncu raw CSV: the units row does not match the header (truncated file?)")
    body = [r for r in rows[2:] if len(r) == len(header)]
    if len(body) != len(rows) - 2:
        raise ValueError(f"ncu raw CSV: {len(rows) - 2 - len(body)} rows have the wrong number of cells (truncated file?)")
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
                raise ValueError(f"ncu raw CSV: column {col!r} has unit {units[i]!r}, which nsightflow does not know; "
                                 "export with: ncu --import R.ncu-rep --page raw --csv --print-units base")
            exp = (0, False)  # a column nsightflow does not read (e.g. launch__* counts of 'cluster'): as printed
        scale = 10.0 ** (exp[0] + (9 if exp[1] else 0))  # plain times in ns
        columns[col] = [_number(v) * scale for v in cells]
    nvtx_col = next((c for c in header if "Push/Pop_Range" in c), None)
    stacks = [parse_nvtx(v) for v in columns[nvtx_col]] if nvtx_col else [[] for _ in body]
    columns["nvtx_domain"] = [s[-1]["domain"] if s else None for s in stacks]
    columns["nvtx_range"] = [s[-1]["range"] if s else None for s in stacks]
    columns["nvtx_payload"] = [s[-1]["payload"] if s else None for s in stacks]
    df = pd.DataFrame(columns)
    df["ID"] = df["ID"].astype(int)
    return df, dict(zip(header, units))

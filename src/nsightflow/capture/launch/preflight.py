"""Preflight for the Nsight backend: is this host able to give real numbers, before any capture runs?

Checks, each with the fix when it fails, in two jobs: the host's (a CUDA GPU visible to the driver, the device the
workflow planned for, nsys and ncu found, with versions) before the timeline; counter access (a one-kernel ncu
probe: in containers ERR_NVGPUCTRPERM is common and otherwise only shows after a long capture) before any ncu
capture, in a job that runs beside the timeline's (it costs ncu's start, about 2-3 s).
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nsightflow import files
from nsightflow.capture.launch.backend import found, gpus, host_info, slug, tool_version
from nsightflow.capture.launch.children import run
from nsightflow.errors import PreflightError, RecordError
from nsightflow.records import SCHEMA, load_object


@dataclass(frozen=True)
class Check:
    """One check of the host: its name, whether it passed, what was found, and the fix where it failed ('' where
    no fix is the user's: the driver's version is only reported)."""

    name: str
    ok: bool
    detail: str
    fix: str


@dataclass(frozen=True)
class HostChecks:
    """``results/preflight/<device>.json`` and ``results/preflight/counters/<device>.json``: the checks that passed
    on this host (the file exists only when all did) and the host's facts (nsightflow.capture.launch.backend)."""

    checks: list[Check]
    host: dict[str, Any]

    def write(self, path: str | Path) -> None:
        files.write_json(path, {"schema": SCHEMA, **asdict(self)})

    @classmethod
    def read(cls, path: str | Path) -> HostChecks:
        data = load_object(path, "preflight checks")
        try:
            return cls([Check(**c) for c in data["checks"]], dict(data["host"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"{path}: not nsightflow's preflight checks ({exc}); delete it to check again") from exc


# One empty kernel through the CUDA driver API (ctypes, no torch import: the probe costs ncu's start only).
PROBE = r"""
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    sys.exit(f"probe failed: no CUDA driver library ({exc})")
def ok(rc, what):
    if rc != 0:
        sys.exit(f"probe failed: {what} returned CUDA error {rc}")
dev, ctx, mod, fn = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
ok(cuda.cuInit(0), "cuInit")
ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
ptx = b".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry nsightflow_probe() { ret; }\n"
ok(cuda.cuModuleLoadData(ctypes.byref(mod), ptx), "cuModuleLoadData")
ok(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"nsightflow_probe"), "cuModuleGetFunction")
ok(cuda.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None), "cuLaunchKernel")
ok(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
print("probe ok")
"""


def probe_argv(ncu: str, python: str, metrics: str = "gpu__time_duration.sum") -> list[str]:
    """ncu over the one-kernel probe: the counter check (and the benchmark's cost and pass counts of it)."""
    return [ncu, "--metrics", metrics, "--clock-control", "none", python, "-c", PROBE]


def _version(tool: str) -> str | None:
    return tool_version(tool) if found(tool) else None


def _probe(argv: list[str], timeout_s: float) -> str:
    try:
        return run(argv, timeout_s=timeout_s)[0]
    except subprocess.TimeoutExpired:
        return f"probe did not finish within {timeout_s} s"


_TOOL_FIX = {
    key: f"install Nsight {name} or set `tools: {key}:` to its full path"
    for key, name in (("nsys", "Systems"), ("ncu", "Compute"))
}


def host_checks(nsys: str, ncu: str, device: str | None = None) -> list[Check]:
    """GPU, driver, nsys and ncu: what a timeline needs before it starts.

    ``device``: the device name the workflow planned for (its files are named after it); this host's
    GPU must be that one, or the numbers would be filed under another GPU's name.
    """
    # Each query waits on a tool's start (nvidia-smi, nsys, ncu): all run at once.
    with ThreadPoolExecutor(max_workers=4) as pool:
        got_names = pool.submit(gpus)
        got_driver = pool.submit(lambda: host_info().get("driver"))
        got_versions = {t: pool.submit(_version, t) for t in (nsys, ncu)}
        names, driver = got_names.result(), got_driver.result()
        versions = {t: f.result() for t, f in got_versions.items()}
    checks = [
        Check(
            "GPU",
            bool(names),
            ", ".join(names) or "nvidia-smi lists no GPU",
            "run on a host with an NVIDIA GPU and driver (in a container: --gpus all), "
            "or set `profiler: torch` (or `auto`)",
        )
    ]
    if names and device is not None:
        same = slug(names[0]) == device
        checks.append(
            Check(
                "device",
                same,
                f"planned for device '{device}', this host's GPU is '{names[0]}'",
                f"set config `device: {names[0]}` (the workflow was planned on a host that does not "
                "have this GPU, e.g. a cluster's login node)",
            )
        )
    checks.append(Check("driver", bool(names), str(driver), ""))
    for tool, key in ((nsys, "nsys"), (ncu, "ncu")):
        ok = versions[tool] is not None
        checks.append(Check(key, ok, str(versions[tool]) if ok else f"{tool!r} not found", _TOOL_FIX[key]))
    return checks


def counter_check(ncu: str, python: str | None = None, timeout_s: float = 300) -> Check:
    """Counter access: ncu over a one-kernel probe. Only ncu's captures need it, so
    its job runs beside the timeline's (in containers ERR_NVGPUCTRPERM is common and otherwise only shows after
    a long capture)."""
    if not found(ncu):  # its job runs beside the host's checks, which say so too
        return Check("counters", False, f"{ncu!r} not found", _TOOL_FIX["ncu"])
    argv = probe_argv(ncu, python or sys.executable)
    out = _probe(argv, timeout_s)
    if "ERR_NVGPUCTRPERM" in out:
        return Check(
            "counters",
            False,
            "ERR_NVGPUCTRPERM",
            "allow counter access: run as root, or load the nvidia module with "
            "NVreg_RestrictProfilingToAdminUsers=0 (containers: --cap-add SYS_ADMIN)",
        )
    ok = "==PROF== Profiling" in out and "probe ok" in out
    why = "profiled its kernel" if ok else "failed: " + " | ".join(out.strip().splitlines()[-4:])
    return Check(
        "counters",
        ok,
        f"one-kernel ncu probe {why}",
        "run the probe by hand to see why: " + " ".join(argv[:-1]) + " '<probe>'",
    )


def preflight(nsys: str, ncu: str, out_json: str | Path, device: str | None = None) -> HostChecks:
    """The host's checks (rule preflight, before the timeline); write ``out_json`` only when all pass, else raise
    PreflightError listing the failures."""
    return _publish(host_checks(nsys, ncu, device), out_json)


def counter_preflight(ncu: str, out_json: str | Path, python: str | None = None) -> HostChecks:
    """The counter check (rule counters, before any ncu capture), written and raised as ``preflight`` does."""
    return _publish([counter_check(ncu, python)], out_json)


def _publish(checks: list[Check], out_json: str | Path) -> HostChecks:
    failed = [c for c in checks if not c.ok and c.fix]
    if failed:
        raise PreflightError(
            "this host cannot run the Nsight backend:\n"
            + "\n".join(f"- {c.name}: {c.detail}. Fix: {c.fix}" for c in failed)
        )
    record = HostChecks(checks, host_info())
    record.write(out_json)
    return record

"""Which profiler backend runs: Nsight (nsys + ncu on a CUDA GPU), torch.profiler, or captures made elsewhere."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any, Literal

from nsightflow.errors import ConfigError
from nsightflow.files import safe_name

BACKENDS = ("nsight", "torch", "auto")
Backend = Literal["nsight", "torch", "captures"]  # what runs: a profiler's backend, or the analysis of captures


def found(binary: str) -> bool:
    """Whether ``binary`` is on PATH or is a path to a file."""
    return shutil.which(binary) is not None or Path(binary).is_file()


def smi_query(field: str) -> list[str]:
    """One value per GPU of ``nvidia-smi --query-gpu=<field>`` (empty without nvidia-smi, a driver or a GPU)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()] if out.returncode == 0 else []


def gpus() -> list[str]:
    """GPU names nvidia-smi lists (empty without a driver or a GPU)."""
    return smi_query("name")


def resolve(
    requested: str, nsys: str, ncu: str, captures: str | None = None, gpu_names: list[str] | None = None
) -> tuple[Backend, str]:
    """(backend, why). ``captures`` set means analysis of existing captures: no profiler runs.
    ``gpu_names``: what nvidia-smi lists, when already probed."""
    if captures:
        return "captures", f"config 'captures' is set: analysing the captures in {captures}, running no profiler"
    if requested not in BACKENDS:
        raise ConfigError(f"profiler {requested!r}: use one of {', '.join(BACKENDS)}")
    if requested != "auto":
        return ("nsight" if requested == "nsight" else "torch"), f"config 'profiler: {requested}'"
    gpu_names = gpus() if gpu_names is None else gpu_names
    missing = [
        what
        for what, ok in (
            ("no CUDA GPU (nvidia-smi lists none)", bool(gpu_names)),
            (f"nsys not found ({nsys!r})", found(nsys)),
            (f"ncu not found ({ncu!r})", found(ncu)),
        )
        if not ok
    ]
    if not missing:
        return "nsight", "profiler 'auto': a CUDA GPU, nsys and ncu are usable"
    return "torch", "profiler 'auto' chose torch.profiler: " + "; ".join(missing)


def slug(text: str) -> str:
    """A folder-safe form of a device name ("NVIDIA H200" -> "NVIDIA-H200")."""
    return safe_name(text)


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo, else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


UNKNOWN_GPU = "unknown-gpu"


def device_label(backend: str, names: list[str] | None = None) -> str:
    """A folder-safe name of the device the workload runs on (preflight results are cached under it).

    ``names`` are the GPUs nvidia-smi lists (probed when not given). The Nsight backend on a host
    without a GPU (a cluster's login node) gets ``unknown-gpu``: the preflight on the GPU node then
    asks for config ``device``.
    """
    if backend == "captures":
        return "none"
    names = gpus() if names is None else names
    if names:
        return slug(names[0])
    return UNKNOWN_GPU if backend == "nsight" else "cpu-" + slug(cpu_name())


def tool_version(binary: str) -> str:
    """Last version-looking line of ``binary --version``, or why there is none."""
    try:
        out = subprocess.run(
            [binary, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc.__class__.__name__})"
    lines = [ln.strip() for ln in out.splitlines() if any(ch.isdigit() for ch in ln)]
    return lines[-1] if lines else out.strip()


def tool_versions(backend: str, nsys: str, ncu: str) -> dict[str, Any]:
    """Versions of the software that produces a backend's numbers (torch read without importing it)."""
    from importlib.metadata import PackageNotFoundError, version

    from nsightflow import __version__

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "not installed"
    out = {"nsightflow": __version__, "torch": torch_version}
    if backend in ("nsight", "captures"):
        out.update(nsys=tool_version(nsys), ncu=tool_version(ncu))
    return out


def host_info() -> dict[str, Any]:
    """Host name, GPUs and driver as nvidia-smi reports them (for manifests)."""
    info: dict[str, Any] = {"hostname": platform.node(), "cpu": cpu_name(), "gpus": gpus()}
    if shutil.which("nvidia-smi"):
        info["driver"] = next(iter(smi_query("driver_version")), None)
    return info

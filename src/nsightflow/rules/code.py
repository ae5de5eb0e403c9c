"""What identifies a workload's own code, so that editing it reruns its profiling: the digest of the callable's
module file or of a command's script (a ``.py`` argument, or ``-m module``), and the version string the user may
declare (``code_version``) for code elsewhere. The profiling rules take it as a param: Snakemake reruns a job whose
params changed."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Any


def _module_file(name: str) -> Path | None:
    """The source file of module ``name`` without running it (its parent packages are imported)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _script(command: list[str], cwd: str | None) -> Path | None:
    """A command's Python source: its first ``.py`` argument (relative to ``cwd``), or the module after ``-m``."""
    for i, arg in enumerate(command):
        if arg == "-m" and i + 1 < len(command):
            return _module_file(command[i + 1])
        if arg.endswith(".py"):
            path = Path(cwd or ".") / arg
            return path if path.is_file() else None
    return None


def code_identity(spec: dict[str, Any]) -> dict[str, Any]:
    """``{"file", "sha256"}`` of the workload's own source where it can be found, and its declared ``version``."""
    if "command" in spec:
        path = _script(list(spec["command"]), spec.get("cwd"))
    else:
        path = _module_file(str(spec["callable"]).split(":", 1)[0])
    out: dict[str, Any] = {"version": spec.get("code_version")}
    if path is not None:
        out.update(file=str(path), sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    return out

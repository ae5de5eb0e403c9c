"""Writing outputs so that a killed job never leaves a complete-looking file, and names safe for folders.

Every output is written beside its target (``<name>.tmp``) and moved into place in one rename; Snakemake
then sees either no file or a whole one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def staging(path: str | Path) -> Path:
    """Where ``path`` is written before it is published: beside it, same folder (so the rename is atomic)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(path.name + ".tmp")


def publish(tmp: str | Path, final: str | Path) -> None:
    """Move a finished output (file or folder) into place."""
    Path(final).parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, final)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    tmp = staging(path)
    tmp.write_text(text)
    publish(tmp, path)


def write_json(path: str | Path, data: Any, indent: int = 2) -> None:
    """Write ``data`` as JSON to ``path`` atomically (values JSON cannot hold are written as strings)."""
    write_text(path, json.dumps(data, indent=indent, default=str))


def safe_name(text: str, fallback: str = "unknown") -> str:
    """A folder-safe form of a name ("NVIDIA H200" -> "NVIDIA-H200"): runs of other characters become '-'."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "-", text).strip("-") or fallback


@contextmanager
def scratch(parent: str | Path, what: str) -> Iterator[str]:
    """A private folder (mode 0700) for one job's scratch files, inside ``parent`` (the run's results, never a shared
    temporary folder), removed when the job ends; a job killed outright (kill -9) leaves it there, in the run's own
    folder, where the next run of that job removes it. Its path is absolute: a command runs in its own folder
    (``cwd:``) and writes its records there."""
    parent = Path(parent).resolve()
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob(f".{what}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix=f".{what}-", dir=parent)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)

"""A rule script's body as one job: its failure lands in the rule's log, it leaves no staging file behind, and it
ends with the workflow.

- Snakemake's ``script:`` jobs print their traceback to stderr; on a cluster or in a long run the log file is where
  a user looks: any exception is appended to the rule's log.
- Outputs are written beside their targets and renamed into place (nsightflow.files); a job that fails, is stopped
  or outlives its workflow removes those staging files (a full disk left ``*.tmp`` files behind).
- A job whose workflow dies (killed, by SIGKILL too, or hung up) kills what it started and exits at once, before it
  publishes anything: the harness once went on for 20 s writing into ``results/`` after Snakemake was gone.
Every script in workflow/scripts runs its body inside ``rule_job``.
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from nsightflow.capture.launch import children


def _note(log_path: str | Path, text: str) -> None:
    try:
        with open(log_path, "a") as log:
            log.write(text)
    except OSError:
        pass  # a full disk must not replace the job's own error


def staging_files(outputs: Sequence[str | Path]) -> list[Path]:
    """The staging files and folders the job's outputs may have beside them: ``<name>.tmp``, a tool's
    ``<stem>.tmp.<ext>`` (nsys and ncu name their own outputs), the harness's ``<name>.harness.json``."""
    found: list[Path] = []
    for out in map(Path, outputs):
        stem = out.name.split(".", 1)[0]
        if out.parent.is_dir():
            for pattern in (f"{out.name}.tmp*", f"{stem}.tmp*", f"{out.name}.harness.json"):
                found += out.parent.glob(pattern)
    return sorted(set(found))


def remove_staging(outputs: Sequence[str | Path]) -> None:
    for path in staging_files(outputs):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _since_start() -> str:
    """How long ago this process started (Linux: /proc/self/stat's start against /proc/uptime), so a job's log
    says what the interpreter and the imports before the body cost, and when (epoch seconds) the interpreter started
    and the job ended, so that a benchmark can place each job on the workflow's own clock and time what lies between
    jobs (Snakemake's work); nothing where that cannot be read."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        since = uptime - ticks / os.sysconf("SC_CLK_TCK")
        now = time.time()
        return f" ({since:.1f} s since its interpreter started; epoch {now - since:.2f} to {now:.2f})"
    except (OSError, ValueError, IndexError):
        return ""


@contextmanager
def rule_job(log_path: str | Path, outputs: Sequence[str | Path] = ()) -> Iterator[None]:
    """Run a rule script's body: log its failure, remove its staging files on any way out but success, and end it
    (and everything it started) when the workflow ends."""
    outputs = [str(o) for o in outputs]

    def workflow_died(pid: int) -> None:
        # Said first: killing the job's children wakes its main thread, which may end the process before us.
        _note(
            log_path,
            f"\n[nsightflow] the workflow (snakemake, pid {pid}) ended while this job ran: the job stops before "
            "publishing anything, and kills every process it started\n",
        )
        killed = children.kill_descendants()
        _note(log_path, f"[nsightflow] killed: {'; '.join(killed)[:2000] or 'none left'}\n")
        remove_staging(outputs)
        os._exit(1)

    children.watch_workflow(workflow_died)
    started = time.time()
    try:
        yield
        _note(log_path, f"\n[nsightflow] the job took {time.time() - started:.2f} s{_since_start()}\n")
    except BaseException as exc:
        remove_staging(outputs)
        _note(log_path, f"\n[nsightflow] the job failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        raise

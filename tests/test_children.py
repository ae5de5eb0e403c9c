"""Every child process dies with its job: the kill's scan of the process tree, on real processes."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import process_alive

from nsightflow.capture.launch import children


def test_a_process_in_a_session_of_its_own_dies_with_the_tool_that_started_it(tmp_path):
    # As a rank that torchrun starts in a session of its own, under ncu: killing the tool's process group misses it.
    pid_file = tmp_path / "pid"
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        children.run([sys.executable, "-c", script], timeout_s=3)
    pid = int(pid_file.read_text())
    assert not process_alive(pid)
    assert f"killed with the tool: {pid} " in "".join(exc.value.__notes__)


def test_a_scan_that_misses_a_process_being_handed_over_is_made_again(monkeypatch):
    # /proc is read file by file: a process whose parent is being killed can be missed by one scan (its parent read
    # after it ended, itself before it was given to the subreaper). The kill scans until two scans find none.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    real, calls = children.descendants, []

    def missed_once(root=None, spare=frozenset()):
        calls.append(root)
        return [] if len(calls) == 1 else real(root, spare)

    monkeypatch.setattr(children, "descendants", missed_once)
    try:
        assert children.kill_descendants(settle=False) == []  # the job's ending, nothing being killed: one scan
        assert child.poll() is None
        calls.clear()
        killed = children.kill_descendants()
        assert [k.split()[0] for k in killed] == [str(child.pid)] and not process_alive(child.pid)
    finally:
        child.kill()


def test_a_spared_process_keeps_the_processes_it_starts(tmp_path):
    """A run's sweep of what it left behind spares the caller's other processes and what they start meanwhile (the
    ranks of a launch held beside the run, let go before the run ends), and kills the rest."""
    started = tmp_path / "grandchild.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
         f"'import time; time.sleep(60)']); open({str(started)!r}, 'w').write(str(p.pid)); time.sleep(60)"]
    )  # fmt: skip
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        while not started.exists() or not started.read_text():
            time.sleep(0.05)
        grandchild = int(started.read_text())
        assert {parent.pid, grandchild, other.pid} <= set(children.descendants())
        assert set(children.descendants(spare=frozenset({parent.pid}))) >= {other.pid}
        assert not {parent.pid, grandchild} & set(children.descendants(spare=frozenset({parent.pid})))
        killed = children.kill_descendants(frozenset({parent.pid}), settle=False)
        assert str(other.pid) in [k.split()[0] for k in killed]
        assert process_alive(parent.pid) and process_alive(grandchild) and not process_alive(other.pid)
    finally:
        if started.exists() and started.read_text():
            try:
                os.kill(int(started.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.kill()
        other.kill()
        parent.wait()
        other.wait()

"""Every child process dies with its job: the kill's scan of the process tree, on real processes."""

import subprocess
import sys

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

    def missed_once(root=None):
        calls.append(root)
        return [] if len(calls) == 1 else real(root)

    monkeypatch.setattr(children, "descendants", missed_once)
    try:
        assert children.kill_descendants(settle=False) == []  # the job's ending, nothing being killed: one scan
        assert child.poll() is None
        calls.clear()
        killed = children.kill_descendants()
        assert [k.split()[0] for k in killed] == [str(child.pid)] and not process_alive(child.pid)
    finally:
        child.kill()

"""The hook's start in a command's program: :func:`install`, called at interpreter start by the run's
``sitecustomize`` (nsightflow.capture.launch.hook_site) where ``NSIGHTFLOW_HOOK`` holds its settings: the tracker of
the run's mode (nsightflow.capture.inside.hook; the timed run's: nsightflow.capture.inside.hook_timed) made, the
program's NVTX calls wrapped, and the record written at exit."""

from __future__ import annotations

import atexit
import os

from nsightflow.capture.inside import hook_nvtx
from nsightflow.capture.inside.hook import Tracker
from nsightflow.capture.inside.hook_settings import HOOK_ENV, JOB_ENV, HookSettings
from nsightflow.capture.inside.hook_timed import TimedTracker
from nsightflow.capture.launch.children import die_with

TRACKER: Tracker | None = None  # this process's


def install(settings: HookSettings | None = None) -> Tracker | None:
    """Install the hook for this process (from ``NSIGHTFLOW_HOOK`` unless given); its record is written at exit."""
    global TRACKER
    if settings is None:
        text = os.environ.get(HOOK_ENV)
        if not text:
            return None
        settings = HookSettings.from_env(text)
    TRACKER = tracker = tracker_for(settings)  # the settings stay in the environment: ranks are child processes
    die_with(os.environ.get(JOB_ENV, ""))  # a daemon the program starts, or an orphaned rank, ends with the job
    hook_nvtx.wrap(tracker)
    # beside the other launch (nsightflow.capture.inside.gate), before the program's first line, torch imported and no
    # GPU touched: the probe waits for the stages, the timed run for the probe to be idle (never inside its clock);
    # or, gate_at contact, at the program's first contact with what both launches share (after install, below)
    late = tracker.gated and settings.gate_at == "contact"
    if not late:
        tracker.pass_gate()
    pending = late and settings.mode != "timed"  # a probe whose autotuning choices come at its gate
    if settings.mode == "timed" or tracker.s.tuning is not None or pending:  # the timed run's choices, taken when
        from nsightflow.capture.inside import hook_tuning  # profiled

        tracker.tuning = hook_tuning.install(None if settings.mode == "timed" else (tracker.s.tuning or {}))
    if settings.step_functions:  # the calls of the functions it names are its steps
        from nsightflow.capture.inside import hook_steps

        tracker.steps_by = hook_steps.install(tracker, settings.step_functions, settings.step_inputs)
    elif tracker.follows_auto():
        from nsightflow.capture.inside import hook_auto

        tracker.auto = hook_auto.install(tracker)  # stages for a program that opens no range of its own
    if late:
        from nsightflow.capture.inside.gate import Contacts

        tracker.contacts = Contacts(tracker.pass_gate)
        tracker.contacts.install()
    atexit.register(tracker.finish)
    return tracker


def tracker_for(settings: HookSettings) -> Tracker:
    """The tracker of a run in ``settings.mode``: the timed run's logs its ranges (capture.inside.hook_timed)."""
    return TimedTracker(settings) if settings.mode == "timed" else Tracker(settings)

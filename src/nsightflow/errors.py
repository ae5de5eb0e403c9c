"""Every error nsightflow raises for a user to act on, in one family: its message says the cause, the file or config
key, and the fix. A rule's job fails with it (nsightflow.rulejob writes it to the rule's log); library callers can
catch :class:`NsightflowError` alone. The mixins (ValueError, RuntimeError) keep the built-in kind each one is."""

from __future__ import annotations


class NsightflowError(Exception):
    """The base of every error nsightflow raises on purpose."""


class ConfigError(NsightflowError, ValueError):
    """The config is wrong; the message names the key and what to change."""


class WorkloadError(NsightflowError, RuntimeError):
    """The user's workload could not be loaded or run; the message says why and what to change."""


class ToolError(NsightflowError, RuntimeError):
    """A profiler failed; the message names the command, the cause and the log."""


class CrashError(ToolError):
    """A profiler's program died of a fatal signal (its own process, or a rank as torchrun reports it)."""

    def __init__(self, message: str, signal_name: str) -> None:
        super().__init__(message)
        self.signal_name = signal_name


class CaptureError(ToolError):
    """An ncu capture that profiled nothing, too little, or was refused; the message is the diagnosis."""


class PreflightError(ToolError):
    """This host cannot profile; the message lists each failed check and its fix."""


class InputError(NsightflowError, ValueError):
    """An input file cannot be believed: malformed, cut, edited, or of another run; the message names the file,
    the row, column or key, and how to make it again."""


class TimelineError(InputError):
    """The nsys export cannot be attributed; the message names the file and what is missing."""


class PlanError(InputError):
    """The timeline cannot be planned from; the message says what it lacks."""


class MatchError(InputError):
    """ncu results and the timeline disagree; the message says where."""


class CapturesError(InputError):
    """A directory of captures made elsewhere cannot be analysed; the message names the file and the fix."""


class InconsistentInputs(InputError):
    """A run's inputs disagree with one another; the message names them, where, and the fix."""


class RecordError(InputError):
    """A run file (nsightflow.records) is not what its reader expects; the message names the file and the key."""


class RegressionError(NsightflowError, RuntimeError):
    """The regression gate found a number worse than its baseline beyond threshold and noise; the message is the
    verdict table (results/check.txt's, the failures first) and how to accept the change."""

"""A program's own numbers, as it prints them: one line ``nsightflow-metrics: {json object}`` in its output (the
built-in serving workload prints its tokens per second, time to first token and per output token so; any program may).
Read from the timed run, where nothing is collecting; the run page shows them beside nsightflow's."""

from __future__ import annotations

import json
from typing import Any

from nsightflow.errors import CaptureError

PREFIX = "nsightflow-metrics: "


def own_metrics(output: str) -> dict[str, Any]:
    """The last such line's object in ``output`` (a process's printing may interleave: the prefix is found anywhere
    in a line); {} where there is none. A line that is not a JSON object is an error naming it."""
    found: dict[str, Any] = {}
    for line in output.splitlines():
        at = line.find(PREFIX)
        if at < 0:
            continue
        text = line[at + len(PREFIX) :]
        try:
            said = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CaptureError(
                f"the program printed {PREFIX.strip()!r} with no JSON object after it ({exc}): {text[:200]!r}; print "
                "one object on that line (json.dumps), or drop the line"
            ) from exc
        if not isinstance(said, dict):
            raise CaptureError(f"the program's {PREFIX.strip()!r} line holds {type(said).__name__}, not an object")
        found = said
    return found

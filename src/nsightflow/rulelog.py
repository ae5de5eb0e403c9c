"""A rule script's failure lands in the rule's log, not only on the terminal that may be gone.

Snakemake's ``script:`` jobs print their traceback to stderr; on a cluster or in a long run the log file
is where a user looks. Every script in workflow/scripts runs its body inside ``errors_to_log``.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def errors_to_log(log_path: str) -> Iterator[None]:
    """Append any exception the block raises (message and traceback) to ``log_path``, then re-raise it."""
    try:
        yield
    except BaseException as exc:
        try:
            with open(log_path, "a") as log:
                log.write(f"\n[nsightflow] the job failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        except OSError:
            pass  # a full disk must not replace the job's own error
        raise

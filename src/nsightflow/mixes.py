"""A step's batch mix, from its inputs' summary (a workload's ``step_inputs``): what a serving loop's iterations are
told apart by. Vocabulary shared by the warm-up rule (a step is compared with steps of its own mix:
nsightflow.capture.read.warmup) and the step tables (nsightflow.analysis.steps)."""

from __future__ import annotations

UNREAD = "?"  # a step whose inputs the summary function could not read: never a made-up mix


def inputs_text(summary: dict[str, float] | None, configured: bool) -> str:
    """A step's inputs as text ('requests=4, prefill_tokens=0'): '' without a step_inputs function, '?' where its
    summary is missing."""
    if not configured:
        return ""
    if summary is None:
        return UNREAD
    return ", ".join(f"{k}={v:g}" for k, v in summary.items())


def mix_label(summary: dict[str, float] | None, configured: bool) -> str:
    """A step's batch mix: for a summary that counts ``prefill_tokens`` and ``decode_tokens`` (a serving engine's),
    'decode-only, batch N' (by batch size), 'prefill-only', 'prefill-heavy' (more prompt tokens than decoded ones)
    or 'mixed'; any other summary is its own mix (its text)."""
    if summary is None or "prefill_tokens" not in summary or "decode_tokens" not in summary:
        return inputs_text(summary, configured)
    prefill, decode = summary["prefill_tokens"], summary["decode_tokens"]
    if prefill == 0:
        return f"decode-only, batch {decode:g}"
    if decode == 0:
        return "prefill-only"
    return "prefill-heavy" if prefill > decode else "mixed"

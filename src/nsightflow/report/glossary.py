"""What each number on a page means: the glossary (the column registry's terms and a few more) and each column's
definition as its header's tooltip (nsightflow.columns)."""

from __future__ import annotations

import html

from nsightflow import columns

# What each number means, shown on every page (and as header tooltips): the registry's definitions.
GLOSSARY = [
    *columns.glossary(),
    (
        "peaks",
        "compute and bandwidth peaks of the device as listed under Peaks: ncu's own peak_sustained metrics at the "
        "measured clocks, or measured matmul and copy rates, or named datasheet values",
    ),
    (
        "MoE and flex attention FLOPs",
        "model FLOPs of a mixture of experts count each token once per expert it is routed to (a grouped GEMM's "
        "offsets: 2·Σ tokens per expert·K·N), not the padding its kernels compute; flex attention counts Q·Kᵀ and "
        "P·V over the (query, key) pairs its block mask keeps, so its MFU is against the model's work, its HFU "
        "against the blocks the kernels computed",
    ),
    ("—", "not available for this backend or stage (e.g. no hardware counters under torch.profiler), never a zero"),
]
# A column's definition; where tables share a name, the first table's (stages).
TIPS = {c.name: c.definition for t in reversed(columns.TABLES.values()) for c in t if c.definition}


def glossary_html() -> str:
    items = "".join(f"<dt>{html.escape(term)}</dt><dd>{html.escape(text)}</dd>" for term, text in GLOSSARY)
    return f"<details class=glossary><summary>What the columns mean</summary><dl>{items}</dl></details>"

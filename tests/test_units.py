"""Numbers on the pages: SI prefixes with three significant digits, percents, never "nan"."""

import math

import pandas as pd

from nsightflow import units
from nsightflow.report import pages, tables


def test_si_prefixes_and_significant_digits():
    assert units.si(9.28e7, "FLOP") == "92.8 MFLOP"
    assert units.si(0.218e12, "FLOP/s") == "218 GFLOP/s"  # the roof that once read "0 TFLOP/s"
    assert units.si(4.8e12, "B/s") == "4.80 TB/s"
    assert units.si(1_509_000_000_000_000.0, "FLOP") == "1.51 PFLOP"
    assert units.si(512.0, "B") == "512 B"
    assert units.si(0.5, "B") == "0.500 B"
    assert units.percent(0.2213) == "22.1%" and units.percent(0.00031) == "0.0310%"
    assert units.count(9.0) == "9" and units.count(1216) == "1,216" and units.count(2.5) == "2.50"
    for bad in (float("nan"), None, float("inf"), "x"):
        assert units.si(bad, "B") == units.percent(bad) == units.ms(bad) == units.count(bad) == "—"


def test_tables_never_show_nan_and_hide_what_has_nothing_to_say():
    df = pd.DataFrame(
        [
            {
                "stage": "prefill",
                "wall_ms": 4.392,
                "mfu_busy": math.nan,
                "flops_analytic_causal": 8.867e7,
                "diverges": False,
            },
            {
                "stage": "decode",
                "wall_ms": 1234.6,
                "mfu_busy": 0.0307,
                "flops_analytic_causal": math.nan,
                "diverges": False,
            },
        ]
    )
    html = tables.table(df, pages.stage_columns(on_cpu=True, backend="torch"))
    assert "nan" not in html.lower()
    assert "<td>4.39</td>" in html and "<td>1,235</td>" in html and "<td>88.7 MFLOP</td>" in html
    assert "<td>3.07%</td>" in html and html.count("<td>—</td>") == 2
    assert "wall ≫ busy" not in html  # a flag column with no flag set is not shown
    assert '<th title="the stage&#x27;s steady steps as the program runs them' in html

"""The report as a person sees it: both pages rendered in headless Chromium (Debian's package), driven by
Playwright. No console errors, no network request (the pages are self-contained), the key elements
visible, no "nan" on the page, every chart image decoded. Screenshots land in the test's temporary
directory (NSIGHTFLOW_SCREENSHOTS=dir keeps them; docs/screenshots/ in the README came from here)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import DATA, copy_workflow, snakemake

pytestmark = pytest.mark.browser

SWEEP = {
    "name": "tinyllm",
    "callable": "nsightflow.workloads.decoder:build",
    "args": dict(
        batch=2,
        prompt=32,
        decode_steps=3,
        vocab=512,
        d_model=64,
        n_layers=2,
        n_heads=4,
        d_ff=128,
        dtype="float32",
        device="cpu",
    ),
    "sweep": {"prompt": [16, 32]},
}
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """A CPU sweep (torch backend) and the H200 captures (counters), each through the real workflow."""
    root = tmp_path_factory.mktemp("browser")
    cpu = copy_workflow(root / "cpu")
    cfg = yaml.safe_load((cpu / "config" / "config.yaml").read_text())
    cfg["workloads"] = [SWEEP]
    cfg["diff"] = {"before": "tinyllm/prompt~16", "after": "tinyllm/prompt~32"}
    (cpu / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    snakemake(cpu, "--cores", "2", "results/report.html", "results/diff.html")
    gpu = copy_workflow(root / "gpu")
    snakemake(gpu, "--cores", "1", "results/report.html", "--config", f"captures={DATA / 'h200_tinyllm_filtered'}")
    return {
        "index (CPU sweep)": cpu / "results" / "report.html",
        "run (CPU)": cpu / "results" / "tinyllm" / "prompt~32" / "report.html",
        "diff (CPU sweep)": cpu / "results" / "diff.html",
        "index (H200 captures)": gpu / "results" / "report.html",
        "run (H200 captures)": gpu / "results" / "captures" / "h200_tinyllm_filtered" / "report.html",
    }


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which("chromium"), args=FLAGS)
        yield b
        b.close()


def _open(browser, path: Path, shots: Path, name: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(
        path=str(shots / (name.replace(" ", "-").replace("(", "").replace(")", "") + ".png")), full_page=True
    )
    return page, errors, requests


@pytest.mark.parametrize("which", ["index (CPU sweep)", "run (CPU)", "index (H200 captures)", "run (H200 captures)"])
def test_page_renders_offline_without_errors(pages, browser, which, tmp_path):
    # (the diff page: test_the_diff_page_renders)
    shots = Path(os.environ.get("NSIGHTFLOW_SCREENSHOTS", tmp_path))
    page, errors, requests = _open(browser, pages[which], shots, which)
    assert errors == [] and requests == []
    text = page.inner_text("body")
    assert "nan" not in text.lower().split() and " nan" not in text.lower() and "e+0" not in text
    # Every chart decoded and on screen.
    imgs = page.locator("img")
    assert imgs.count() >= 1
    for i in range(imgs.count()):
        assert imgs.nth(i).evaluate("i => i.complete && i.naturalWidth > 100")
        assert imgs.nth(i).is_visible()
    assert page.locator("table.stages").first.is_visible()
    # The definitions open on a click and say what MFU is.
    page.locator("summary", has_text="What the columns mean").first.click()
    assert page.locator("dd", has_text="model FLOP utilisation").first.is_visible()
    if which.startswith("run"):
        assert page.locator("h3", has_text="Peaks").is_visible()
        assert page.locator("table.headline").is_visible() and page.locator("ul.advice li").first.is_visible()
        # the configuration folded; the stage table's other columns one tick away
        assert page.locator("summary", has_text="Configuration and tool versions").is_visible()
        assert not page.locator("details:not([open]) pre").first.is_visible()
        hidden = page.locator("table.stages th.more")
        if hidden.count():
            assert not hidden.first.is_visible()
            page.locator(".toggle label").first.click()
            assert hidden.first.is_visible()
        folded = page.locator("details summary", has_text="more")
        if folded.count():  # kernels beyond the top-N are folded away, one click from view
            assert not page.locator("details:not([open]) table").first.is_visible()
            folded.first.click()
            assert page.locator("details[open] table").first.is_visible()
    else:
        assert page.locator("h2", has_text="Where the time goes").is_visible()
        assert page.locator("a", has_text="captures" if "captures" in which else "prompt~16").first.is_visible()
    if "CPU" in which and which.startswith("run"):
        assert "busy ms (CPU operators)" in text and "GPU" not in page.inner_text("table.stages")


def test_the_diff_page_renders(pages, browser, tmp_path):
    page, errors, requests = _open(browser, pages["diff (CPU sweep)"], tmp_path, "diff")
    assert errors == [] and requests == []
    text = page.inner_text("body")
    assert "nan" not in text.lower().split() and "tinyllm/prompt~16 → tinyllm/prompt~32" in text
    assert page.locator("table.stages").first.is_visible()
    # one sentence per stage, wall before → after
    assert page.locator("ul.advice li", has_text="prefill: wall").first.is_visible()
    assert page.locator("ul.advice li", has_text="decode: wall").first.is_visible()


def test_the_kernel_cards_render(browser, tmp_path):
    """The deep-dive cards of the H100 sections recorded in tests/data/h100_sections, on a page of their own."""
    from nsightflow.analysis.cards import cards
    from nsightflow.capture.read import ncu_csv
    from nsightflow.report.cards_html import cards_html
    from nsightflow.report.pages import page as html_page
    from nsightflow.report.pages import write_html

    raw, _ = ncu_csv.parse_raw_csv((DATA / "h100_sections" / "raw.csv").read_text())
    found = cards(raw, (DATA / "h100_sections" / "raw.csv").with_name("details.txt").read_text())
    path = tmp_path / "cards.html"
    write_html(path, html_page("cards", [cards_html(found)]))
    page, errors, requests = _open(browser, path, tmp_path, "cards")
    assert errors == [] and requests == []
    assert page.locator("div.card").count() == 6 and page.locator("div.card h4").first.is_visible()
    advice = page.locator("div.card details").first
    assert not advice.locator("li").first.is_visible()
    advice.locator("summary").click()
    assert advice.locator("li", has_text="grid is too small").first.is_visible()

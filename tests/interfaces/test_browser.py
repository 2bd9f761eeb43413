"""The walkthrough in a real browser: JupyterLab on localhost, headless Chromium driven by Playwright.

Starts JupyterLab token-less from a temporary config and root folder (a copy of the walkthrough,
so autosave never touches the checkout), runs the notebook, presses the widgets' buttons for
detect and configure, changes a choice and plans again. Screenshots go to tests/output/browser/.
Skips where Chromium or Playwright is missing, unless PLAYBOOK_REQUIRE_BROWSER=1 (CI sets it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from playbook.localhost import free_port

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "tests" / "output" / "browser"
CHROMIUM = Path(os.environ.get("PLAYBOOK_CHROMIUM", "/usr/bin/chromium"))
# The flags a closed network needs: no background connections, no component updates.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
STEP_TIMEOUT_MS = 300_000

pytestmark = pytest.mark.browser


def _unavailable(reason: str) -> None:
    if os.environ.get("PLAYBOOK_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser test required but {reason}")
    pytest.skip(reason)


@pytest.fixture
def jupyterlab(tmp_path):
    """A JupyterLab server on localhost without a token; yields (base URL, root folder, outputs folder)."""
    root, config, outputs = tmp_path / "lab", tmp_path / "config", tmp_path / "outputs"
    (root / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "00-walkthrough.ipynb", root / "notebooks")
    (config / "labconfig").mkdir(parents=True)
    # No "receive Jupyter news?" toast over the notebook, no update check (the machine may be offline).
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    port = free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "LLAMA_PLAYBOOK_OUTPUTS": str(outputs)}
    log = (tmp_path / "jupyterlab.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1", "--allow-root",  # CI runs as root
         f"--ServerApp.root_dir={root}", "--IdentityProvider.token=", "--ServerApp.password=",
         "--ServerApp.disable_check_xsrf=True", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + (tmp_path / "jupyterlab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield url, root, outputs
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def run_all_cells(page, until, expect, tries: int = 3) -> None:
    """Run ▸ Run All Cells until ``until`` shows. A kernel that has just said Idle can still drop the
    request (seen: the parameters cell ran, the next one stayed "[ ]"), so unexecuted cells are run again."""
    for attempt in range(1, tries + 1):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            expect(until).to_be_visible(timeout=30_000)
            return
        except AssertionError:
            if attempt == tries or "[*]:" in page.locator(".jp-InputPrompt").all_inner_texts():
                raise


@pytest.mark.long
def test_walkthrough_up_to_the_plan_in_chromium(jupyterlab):
    if not CHROMIUM.is_file():
        _unavailable(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install playwright)")
    url, _root, outputs = jupyterlab
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{url}/lab/tree/notebooks/00-walkthrough.ipynb")
            expect(page.locator(".jp-Notebook")).to_be_visible(timeout=60_000)
            expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
            detect = page.get_by_role("button", name="run next step: detect")
            run_all_cells(page, until=detect, expect=expect)
            page.screenshot(path=str(SCREENSHOTS / "1-start.png"))
            detect.click()
            expect(page.get_by_text("logical cores")).to_be_visible(timeout=STEP_TIMEOUT_MS)
            expect(page.get_by_role("button", name="run next step: configure")).to_be_enabled(timeout=30_000)
            page.screenshot(path=str(SCREENSHOTS / "2-detect.png"), full_page=True)

            page.get_by_role("button", name="run next step: configure").click()
            expect(page.get_by_text("CMAKE_ARGS=", exact=False)).to_be_visible(timeout=STEP_TIMEOUT_MS)
            apply = page.get_by_role("button", name="apply choices and plan again")
            expect(apply).to_be_visible(timeout=30_000)
            page.get_by_role("button", name="apply choices and plan again").scroll_into_view_if_needed()
            page.screenshot(path=str(SCREENSHOTS / "3-plan.png"), full_page=True)

            jobs = page.locator(".widget-inline-hbox", has=page.locator("label", has_text="parallel jobs")).locator("input")
            jobs.fill("1")
            jobs.press("Enter")
            apply.click()
            expect(page.get_by_text("1 parallel jobs")).to_be_visible(timeout=STEP_TIMEOUT_MS)
            expect(page.get_by_role("button", name="run next step: build (attempt 1)")).to_be_enabled(timeout=30_000)
            page.locator("h3", has_text="2 · The plan").scroll_into_view_if_needed()
            page.screenshot(path=str(SCREENSHOTS / "4-replanned.png"), full_page=True)
            # The README's picture: a tall window, the widgets from their first row down.
            page.set_viewport_size({"width": 1300, "height": 1900})
            page.get_by_role("button", name="detect again").evaluate("e => e.scrollIntoView({block: 'start'})")
            page.screenshot(path=str(SCREENSHOTS / "5-walkthrough.png"))
        except Exception:
            page.screenshot(path=str(SCREENSHOTS / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()

    (run,) = [p for p in outputs.iterdir() if (p / "run.json").is_file()]
    assert json.loads((run / "params.json").read_text())["build"]["jobs"] == 1
    assert sorted(p.name for p in (run / "history").iterdir()) == ["001-params", "002-configure"]
    steps = [s["step"] for s in json.loads((run / "run.json").read_text())["steps"]]
    assert steps == ["detect", "configure", "configure"]
    for name in ("1-start", "2-detect", "3-plan", "4-replanned", "5-walkthrough"):
        assert (SCREENSHOTS / f"{name}.png").stat().st_size > 10_000

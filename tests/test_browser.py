"""JupyterLab in headless Chromium: open a notebook, Run All, check what a student would see.

The browser runs one step with an exercise, kernels and a figure (03) and one that starts processes
(09): what JupyterLab adds to a plain kernel (rendering, the kernel's working folder, child
processes) shows there; every step's execution and outputs are checked by strict nbval, and every
step runs in the browser with ``COURSE_ALL_NOTEBOOKS=1`` (``test_all_notebooks.sh --release``).
JupyterLab runs on 127.0.0.1 with a random token over a copy of the notebooks (Run All must not
touch the committed ones). Chromium is Debian's package (/usr/bin/chromium) driven by playwright;
no browser is ever downloaded. Screenshots go to build/browser/. End to end: ``pytest -m e2e``
runs it (the README's ``pytest`` leaves it out); without Chromium, ``pytest -m "e2e and not
browser"``. In CI (``CI`` set) a missing Chromium is a failure, not a skip.
"""

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from chromium import CHROMIUM, CHROMIUM_ARGS, require_chromium
from sample import ALL, sample

from course_utils.tools.launch.command import free_port

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "build" / "browser"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# the first step with a figure (an exercise and its check, kernels), and the first that starts
# processes: each kind of cell once, without paying for the whole series in a browser
FIRST_FIGURE = next(p for p in NOTEBOOKS if '"image/png"' in p.read_text())
FIRST_PROCESSES = next(p for p in NOTEBOOKS if "subprocess" in p.read_text())
IN_THE_BROWSER = sample(NOTEBOOKS, {FIRST_FIGURE.name[:2], FIRST_PROCESSES.name[:2]})


# every cell in the DOM (no windowing), so the test sees each prompt; no news fetched from the
# internet
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false"},
}
# the run is done when the kernel is idle and every code cell's prompt shows its execution count
PROMPTS = "[...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]"
IDLE = """document.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']")"""
DONE = "() => " + IDLE + " && " + PROMPTS + r""".every(p => /\[\d+\]/.test(p.textContent))"""
STARTED = "() => " + PROMPTS + r""".some(p => /\[(\d+|\*)\]/.test(p.textContent))"""
# JupyterLab's dialogs and notifications (the news question, announcements, a kernel message) can
# cover what a test clicks: close them first
DISMISS = """() => {
  document.querySelectorAll('.jp-Dialog .jp-Dialog-button.jp-mod-reject').forEach(b => b.click());
  document.querySelectorAll('.jp-Notification-Toast-Close, .Toastify__close-button')
    .forEach(b => b.click());
}"""
# generous: two busy processes beside the suite slow JupyterLab down many times over
CLICK_S, LOAD_MS, RUN_MS = 120, 180_000, 900_000

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_chromium()
    root = tmp_path_factory.mktemp("lab")
    # outputs cleared, so a cell's prompt shows a number only once it ran here
    for path in IN_THE_BROWSER:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, root / path.name)
    port, token = free_port(), secrets.token_hex(16)
    settings = root / ".settings"
    for plugin, values in SETTINGS.items():
        target = settings / f"{plugin}.jupyterlab-settings"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(root / ".config"),
        "JUPYTER_RUNTIME_DIR": str(root / ".runtime"),
        "JUPYTERLAB_WORKSPACES_DIR": str(root / ".workspaces"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.port_retries=0",
            "--LabApp.news_url=",
            "--LabServerApp.extension_manager=readonly",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + LOAD_MS / 1000
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2).read()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"JupyterLab did not start on 127.0.0.1 within {LOAD_MS // 1000} s "
                            "(timed out, or it exited)")
            time.sleep(0.5)
    yield base, token, root
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()


def _shut_down_kernels(base: str, token: str) -> None:
    """Stop every kernel the server runs, so notebooks opened earlier do not pile up."""
    kernels = json.loads(
        urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10).read()
    )
    for kernel in kernels:
        request = urllib.request.Request(
            f"{base}/api/kernels/{kernel['id']}?token={token}", method="DELETE"
        )
        urllib.request.urlopen(request, timeout=10).read()


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


def _click(page, selector: str) -> None:
    """Click ``selector`` once it is there and nothing covers it (dismissing JupyterLab's dialogs
    and notifications); fail saying it timed out if that takes longer than ``CLICK_S``."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    deadline = time.monotonic() + CLICK_S
    while True:
        page.evaluate(DISMISS)
        try:
            page.click(selector, timeout=10_000)
            return
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                pytest.fail(f"timed out: could not click {selector} within {CLICK_S} s")


def test_the_browser_runs_a_figure_and_the_processes():
    assert [p.name[:2] for p in IN_THE_BROWSER] == (
        [p.name[:2] for p in NOTEBOOKS] if ALL else ["03", "09"]
    )


@pytest.mark.parametrize("path", IN_THE_BROWSER, ids=lambda p: p.stem)
def test_run_all_in_jupyterlab(lab, browser, path):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    base, token, root = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        # one tab, its own workspace
        page.goto(f"{base}/lab/workspaces/{path.stem}/tree/{path.name}?token={token}")
        page.wait_for_selector(
            ".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=LOAD_MS
        )
        page.wait_for_selector(".jp-CodeCell .jp-InputPrompt", timeout=LOAD_MS)
        # on the first page load the command may not reach the notebook yet
        for attempt in range(3):
            _click(page, ".jp-CodeCell .jp-InputArea-editor")  # focus the notebook
            _click(page, ".lm-MenuBar-itemLabel:text-is('Run')")
            _click(page, "li.lm-Menu-item[data-command='runmenu:run-all']:not(.lm-mod-disabled)")
            try:
                page.wait_for_function(STARTED, timeout=30_000, polling=200)
                break
            except PlaywrightTimeout:
                if attempt == 2:
                    pytest.fail("timed out: Run All started no cell in 3 tries of 30 s")
                page.keyboard.press("Escape")
        try:
            page.wait_for_function(DONE, timeout=RUN_MS, polling=500)
        except PlaywrightTimeout:
            pytest.fail(f"timed out: Run All did not finish within {RUN_MS // 1000} s")
        page.evaluate(DISMISS)
        page.keyboard.press("Control+s")
        page.wait_for_function("() => !document.title.startsWith('*')", timeout=LOAD_MS)
        page.wait_for_timeout(500)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{path.stem}.png"), full_page=False)
    finally:
        page.close()
        _shut_down_kernels(base, token)
    saved = json.loads((root / path.name).read_text())
    code = [c for c in saved["cells"] if c["cell_type"] == "code"]
    assert all(c["execution_count"] for c in code), "some cells did not run"
    errors = [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors, f"{path.name}: {errors[0]['ename']}: {errors[0]['evalue']}"
    assert "".join(code[-1]["outputs"][0]["text"]) == f"PASS: {path.stem}\n"

"""Debian's Chromium for the browser tests: where it is and how it starts (never a download)."""

import os
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
]


def require_chromium() -> None:
    """Skip the test without Chromium; in CI (``CI`` set) a missing Chromium is a failure."""
    if CHROMIUM.exists():
        return
    if os.environ.get("CI"):
        pytest.fail("Debian's chromium is not installed (apt-get install chromium); "
                    ".ci/run installs it")
    pytest.skip("no /usr/bin/chromium; install Debian's chromium or run "
                "pytest -m 'e2e and not browser'")

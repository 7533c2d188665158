"""papermill runs a step with its ``parameters`` cell overridden (``-p N_DEVICES 8``)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_papermill_sets_the_device_count(tmp_path):
    out = tmp_path / "01_mesh_setup.ipynb"
    done = subprocess.run(
        [sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "01_mesh_setup.ipynb"),
         str(out), "-p", "N_DEVICES", "8", "--cwd", str(ROOT / "notebooks")],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    cells = json.loads(out.read_text())["cells"]
    injected = [c for c in cells if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and "N_DEVICES = 8" in "".join(injected[0]["source"])
    text = json.dumps([c.get("outputs", []) for c in cells])
    assert "mesh shape: {'data': 8}" in text and "PASS: 01_mesh_setup" in text

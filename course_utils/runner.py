"""Execute the notebook series headless, each notebook in a fresh kernel."""
from __future__ import annotations

import base64
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

PARAMETERS_TAG = "parameters"


@dataclass
class NotebookResult:
    """What one headless run of a notebook produced."""

    path: Path
    seconds: float
    error: str = ""
    figures: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.error


def find_notebooks(folder: Path) -> list[Path]:
    """The step-numbered notebooks (``NN_name.ipynb``) in ``folder``, in step order."""
    found = sorted(p for p in Path(folder).glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise FileNotFoundError(f"no step-numbered notebooks (NN_name.ipynb) in {folder}")
    return found


def set_parameters(nb, parameters: dict) -> None:
    """Rewrite the cell tagged ``parameters`` to assign ``parameters`` (e.g. ``{'N_DEVICES': 8}``)."""
    cells = [c for c in nb.cells if PARAMETERS_TAG in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"expected one cell tagged {PARAMETERS_TAG!r}, found {len(cells)}")
    lines = cells[0].source.splitlines()
    for name, value in parameters.items():
        if not any(line.split("=")[0].strip() == name for line in lines):
            raise ValueError(f"the parameters cell does not set {name}")
        lines = [f"{name} = {value!r}" if line.split("=")[0].strip() == name else line for line in lines]
    cells[0].source = "\n".join(lines)


def run_in_fresh_kernel(nb, cwd: Path, timeout: int, **options) -> None:
    """Execute ``nb`` in place, top to bottom, in a fresh ``python3`` kernel started in ``cwd``.

    ``options`` go to ``nbclient.NotebookClient`` (e.g. ``allow_errors``); its exceptions propagate.
    No per-cell timing metadata is recorded, and the kernel's own log lines are dropped (cell errors
    still arrive as outputs or exceptions).
    """
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(cwd)}}, **options)
    client.execute(stderr=subprocess.DEVNULL)


def execute(path: Path, *, parameters: dict | None = None, timeout: int = 600):
    """Run ``path`` top to bottom in a fresh ``python3`` kernel; return ``(notebook, error text)``."""
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    if parameters:
        set_parameters(nb, parameters)
    try:
        run_in_fresh_kernel(nb, Path(path).parent, timeout)
    except CellExecutionError as exc:
        return nb, _first_line_of_error(exc)
    except (CellTimeoutError, DeadKernelError) as exc:
        return nb, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return nb, ""


def _first_line_of_error(exc) -> str:
    ename = getattr(exc, "ename", "") or "Error"
    evalue = (getattr(exc, "evalue", "") or "").splitlines()
    return f"{ename}: {evalue[0] if evalue else ''}"


def save_figures(nb, stem: str, folder: Path) -> list[Path]:
    """Write every ``image/png`` output of ``nb`` as ``folder/stem_K.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                target = folder / f"{stem}_{len(written) + 1}.png"
                target.write_bytes(base64.b64decode(png))
                written.append(target)
    return written


def run_one(path: Path, out_dir: Path, *, parameters: dict | None = None, in_place: bool = False,
            timeout: int = 600) -> NotebookResult:
    """Execute one notebook; save the executed copy (to ``out_dir`` or, if asked, over the original)."""
    start = time.perf_counter()
    nb, error = execute(path, parameters=parameters, timeout=timeout)
    seconds = time.perf_counter() - start
    out_dir.mkdir(parents=True, exist_ok=True)
    target = path if (in_place and not error) else out_dir / path.name
    nbformat.write(nb, target)
    figures = save_figures(nb, path.stem, out_dir / "figures")
    return NotebookResult(path, seconds, error, figures)

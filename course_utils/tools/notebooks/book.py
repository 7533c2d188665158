"""``course book``: the series as a static HTML site, built by Jupyter Book from committed outputs.

Nothing is executed: each page shows the outputs committed in its notebook. The build runs in a
temporary folder (the notebooks are copied there with a generated ``_config.yml``, ``_toc.yml``
and landing page ``index.md``); only the finished HTML is copied to ``--out``. The site needs no
network, at build time or when read: MathJax is served from the site itself (a copy of the files
shipped by the ``jupyter-server-mathjax`` package) and every button or script that would fetch
something remote (launch buttons, repository links, analytics, thebe, widget JavaScript) is off.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from course_utils.constants import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from course_utils.tools.errors import CourseError, usage
from course_utils.tools.notebooks.chapters import (
    APPENDIX,
    Step,
    chapters,
    read_appendix,
    read_step,
)

UNIT_TITLE = "Communication-efficient algorithms"
# the first line of each notebook's first markdown cell: "# Step N — title"
INSTALL_HINT = 'install the book tools with: pip install -e ".[book]"'
MATHJAX_DIR = "mathjax"  # under the site's _static/
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full"  # the combined configuration the package ships
ASSETS = "_book_assets"  # source folder whose contents Sphinx copies to _static/
BUILD_TIMEOUT = 600  # seconds
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours in Sphinx's output
# the first line of a failed build's output that says why, e.g. "KeyError: 'x'"
REASON = re.compile(r"[\w.]*(Error|Exception): \S|Could ?n[o']t |Cannot ")
CSS_NAME, FAVICON_NAME = "course-book.css", "favicon.svg"
# code cells are at most 88 columns (ruff checks the notebooks): the code font shrinks with the
# column so that 88 monospace characters (0.61 em each at most) fit without sideways scrolling
CSS = """\
div.cell_input { container-type: inline-size; }
div.cell_input pre { font-size: clamp(10px, calc((100cqi - 2rem - 4px) / 54), 0.875rem); }
"""
# four devices in the colours JAX uses to draw them; a favicon also stops /favicon.ico requests
FAVICON = """\
<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">
<rect x="1" y="1" width="6" height="6" fill="#393b79"/><rect x="9" y="1" width="6" height="6" \
fill="#de9ed6"/><rect x="1" y="9" width="6" height="6" fill="#ad494a"/><rect x="9" y="9" \
width="6" height="6" fill="#b5cf6b"/></svg>
"""

INTRO = """\
One gradient, communicated in different ways. On four logical CPU devices, the unit computes the
same mean-squared-error gradient and moves it between the devices with each of JAX's collectives:
an **all-reduce** leaves every device with the whole sum, a **reduce-scatter** leaves each device
one summed slice, and an **all-gather** puts the slices back together. Along the way you check
where each result is placed, predict how many bytes each collective sends with the idealized
**ring payload model**, time the compiled calls honestly, update only a slice of the parameters
before gathering them (ZeRO-style), and finally run the same kernels on JAX's **multi-process**
runtime, one process per device.
"""

HOW_TO_RUN = """\
From the course's root folder, install the package and its tools, run every step as a check, then
open the notebooks in JupyterLab:

```bash
pip install -e ".[dev]"
course run
jupyter lab notebooks/
```

Each page here shows a notebook with the outputs it was committed with; nothing was re-run to
build this site.
"""


@dataclass(frozen=True)
class Site:
    """A built site: its steps and the build's warnings (the log is kept only if there are any)."""

    steps: list[Step]
    warnings: list[str]
    log: Path | None


def landing_page(steps: list[Step]) -> str:
    """The MyST source of the landing page: what the unit teaches, the steps, how to run it.

    Args:
        steps: the notebooks of the series, in order; each becomes a row of the step table.
    """
    rows = [
        f"| {s.number} | [{s.title.replace('|', chr(92) + '|')}]({s.path.name}) |" for s in steps
    ]
    table = "\n".join(["| Step | Title |", "| ---: | :--- |", *rows])
    return f"# {UNIT_TITLE}\n\n{INTRO}\n## The steps\n\n{table}\n\n## How to run it\n\n{HOW_TO_RUN}"


def mathjax_root() -> Path:
    """The folder of MathJax 2 files shipped by ``jupyter-server-mathjax``.

    Raises:
        CourseError: the package is not installed.
    """
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    root = Path(spec.origin).parent / "static" if spec and spec.origin else None
    if root is None or not (root / "MathJax.js").is_file():
        raise usage(f"MathJax (jupyter-server-mathjax) is not installed; {INSTALL_HINT}")
    return root


def book_config() -> dict:
    """Jupyter Book's ``_config.yml`` as data: committed outputs only, nothing fetched remotely."""
    from jupyter_book.config import get_default_sphinx_config

    # sphinx-thebe would put a CDN address for thebe's JavaScript on every page
    extensions = [e for e in get_default_sphinx_config()["extensions"] if e != "sphinx_thebe"]
    return {
        "title": UNIT_TITLE,
        "author": "the course team",
        "copyright": "",
        "only_build_toc_files": True,
        "exclude_patterns": [ASSETS, "_build", "**.ipynb_checkpoints"],
        "execute": {"execute_notebooks": "off"},
        "parse": {"myst_enable_extensions": ["colon_fence", "dollarmath"]},
        # no launch, repository or issue buttons, no analytics, no comments, no thebe
        "html": {
            **dict.fromkeys(["use_edit_page_button", "use_repository_button"], False),
            "use_issues_button": False,
            "analytics": {"google_analytics_id": "", "plausible_analytics_domain": ""},
            "comments": {"hypothesis": False, "utterances": False},
        },
        "launch_buttons": {
            **dict.fromkeys(["binderhub_url", "jupyterhub_url", "colab_url", "deepnote_url"], ""),
            "thebe": False,
        },
        "repository": {"url": ""},
        "sphinx": {
            "recursive_update": True,  # the options below update Jupyter Book's, not replace them
            "config": {
                # without a default the theme logs a console error; a reader's choice is kept
                "html_context": {"default_mode": "light"},
                "html_css_files": [CSS_NAME],
                "html_favicon": f"{ASSETS}/{FAVICON_NAME}",
                "nb_execution_mode": "off",
                "nb_ipywidgets_js": {},
                "smartquotes": False,  # titles and prose read exactly as the notebooks write them
                "html_static_path": [ASSETS],
                "mathjax_path": f"{MATHJAX_DIR}/MathJax.js?config={MATHJAX_CONFIG}",
                "mathjax2_config": {
                    "tex2jax": {
                        "inlineMath": [["\\(", "\\)"]],
                        "displayMath": [["\\[", "\\]"]],
                        "processClass": "tex2jax_process|mathjax_process|math|output_area",
                    },
                    # the package ships STIX-Web web fonts only
                    "HTML-CSS": {
                        "availableFonts": [],
                        "preferredFont": None,
                        "imageFont": None,
                        "webFont": "STIX-Web",
                        # MathJax's placeholder font, url('about:blank'), is a CORS error in
                        # Chromium; a local() name that matches nothing is silently skipped
                        "styles": {
                            "@font-face": {
                                "font-family": "MathJax_Blank",
                                "src": "local('MathJax_Blank')",
                            }
                        },
                    },
                },
                "extensions": extensions,
            },
        },
    }


def write_source(steps: list[Step], source: Path, mathjax: Path,
                 appendices: list[Step] = ()) -> None:
    """Lay out the book's source folder: the notebooks, the landing page, config, TOC, MathJax.

    Args:
        steps: the notebooks to copy, in order.
        source: an empty folder to write into.
        mathjax: the MathJax folder to copy, see :func:`mathjax_root`.
        appendices: appendix notebooks (:func:`read_appendix`), copied to ``appendix/``.
    """
    for step in steps:
        shutil.copy2(step.path, source / step.path.name)
    if appendices:
        (source / APPENDIX).mkdir()
    for appendix in appendices:
        shutil.copy2(appendix.path, source / APPENDIX / appendix.path.name)
    (source / "index.md").write_text(landing_page(steps), encoding="utf-8")
    # YAML is a superset of JSON: no quoting rules to get wrong
    (source / "_config.yml").write_text(json.dumps(book_config(), indent=2), encoding="utf-8")
    toc = {"format": "jb-book", "root": "index", "chapters": chapters(steps, list(appendices))}
    (source / "_toc.yml").write_text(json.dumps(toc, indent=2), encoding="utf-8")
    shutil.copytree(mathjax, source / ASSETS / MATHJAX_DIR)
    (source / ASSETS / CSS_NAME).write_text(CSS, encoding="utf-8")
    (source / ASSETS / FAVICON_NAME).write_text(FAVICON, encoding="utf-8")


def run_jupyter_book(source: Path, output: Path, log: Path) -> Path:
    """Build the HTML site of ``source`` with Jupyter Book in a child Python process.

    Args:
        source: the folder laid out by :func:`write_source`.
        output: where Jupyter Book puts its ``_build`` folder.
        log: the file that receives the build's output.

    Returns:
        The folder with the built HTML.

    Raises:
        CourseError: the build failed or timed out; the message names the log.
    """
    command = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build"]
    command += [str(source), "--path-output", str(output), "--builder", "html", "--all"]
    with log.open("w", encoding="utf-8") as out:
        try:
            done = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            raise CourseError(
                f"the build took over {BUILD_TIMEOUT} s; log: {log}", EXIT_FAILED
            ) from None
    html = output / "_build" / "html"
    if done.returncode != 0 or not (html / "index.html").is_file():
        lines = [ANSI.sub("", line).strip() for line in log.read_text("utf-8").splitlines()]
        reason = next((line[:160] for line in lines if REASON.match(line)), "see its log")
        raise CourseError(
            f"Jupyter Book failed (exit status {done.returncode}): {reason}; log: {log}",
            EXIT_FAILED,
        )
    return html


def check_out(out: Path, folder: Path) -> None:
    """Refuse an ``--out`` that would overwrite the notebooks or a folder that is not a site.

    Args:
        out: the folder the site goes to.
        folder: the notebooks' folder.

    Raises:
        CourseError: ``out`` holds, is or is inside ``folder``, or holds files but no built site.
    """
    out, folder = out.resolve(), folder.resolve()
    if out == folder or folder in out.parents or out in folder.parents:
        raise usage(f"--out {out} would overwrite the notebooks' folder; choose another --out")
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and not (out / ".buildinfo").exists()):
        raise usage(f"--out {out} exists and is not a site built before; choose another --out")


def build(folder: Path, out: Path, on_start: Callable[[str], object] | None = None) -> Site:
    """Build the site of the step notebooks in ``folder`` and put its HTML in ``out``.

    Args:
        folder: the step notebooks (``NN_name.ipynb``) with their committed outputs.
        out: the site's folder; a site built there before is replaced, other files are not.
        on_start: called with one line once the input is checked and the build starts.

    Returns:
        What was built: the steps, in order, and the build's warnings (with its log if any).

    Raises:
        CourseError: bad input, missing tools or a failed build (the message is one line).
    """
    from course_utils.tools.notebooks.run import find_notebooks

    try:
        notebooks = find_notebooks(folder)
    except FileNotFoundError as exc:
        raise usage(str(exc)) from None
    if importlib.util.find_spec("jupyter_book") is None:
        raise usage(f"Jupyter Book is not installed; {INSTALL_HINT}")
    mathjax = mathjax_root()
    check_out(out, folder)
    steps = [read_step(path) for path in notebooks]
    appendices = [read_appendix(path) for path in sorted(Path(folder).glob(f"{APPENDIX}/*.ipynb"))]
    if on_start:
        on_start(f"building the site of {len(steps)} steps with Jupyter Book (committed outputs)")
    handle, name = tempfile.mkstemp(prefix="course-book-", suffix=".log")
    os.close(handle)
    log = Path(name)
    with tempfile.TemporaryDirectory(prefix="course-book-") as tmp:
        source = Path(tmp) / "book"
        source.mkdir()
        write_source(steps, source, mathjax, appendices)
        html = run_jupyter_book(source, Path(tmp) / "output", log)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(html, out)
    warnings = [
        ANSI.sub("", line) for line in log.read_text("utf-8").splitlines() if "WARNING" in line
    ]
    if not warnings:
        log.unlink()
    return Site(steps, warnings, log if warnings else None)


def _run_book(args: argparse.Namespace) -> int:
    out = Path(args.out)
    start = time.perf_counter()
    try:
        site = build(Path(args.folder), out, on_start=print)
    except KeyboardInterrupt:
        raise CourseError(f"interrupted; {out} may be incomplete", EXIT_INTERRUPTED) from None
    seconds = time.perf_counter() - start
    print(f"site of {len(site.steps)} steps written in {seconds:.0f} s: open {out / 'index.html'}")
    if site.warnings:
        print(f"{len(site.warnings)} build warnings, first: {site.warnings[0]}; log: {site.log}")
    return EXIT_OK


def add_book_parser(sub) -> None:
    """Register ``course book``.

    Args:
        sub: the ``course`` parser's subparsers object.
    """
    book = sub.add_parser("book", help="build the series as a static HTML site")
    book.add_argument("--out", required=True, help="folder for the site (index.html is the start)")
    book.add_argument("--folder", default="notebooks", help="the steps (default: notebooks)")
    book.set_defaults(handler=_run_book)

"""``course book``: the series as a static HTML site, built by Jupyter Book from committed outputs.

Nothing is executed: each page shows the outputs committed in its notebook. The build runs in a
temporary folder (the notebooks are copied there with a generated ``_config.yml``, ``_toc.yml``
and landing page ``index.md``); only the finished HTML is copied to ``--out``. The site needs no
network, at build time or when read: MathJax 3 is served from the site itself (a copy of the
files shipped by the ``sphinx-mathjax-offline`` package) and every button or script that would fetch
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

import nbformat

from course_utils.constants import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from course_utils.tools.errors import CourseError, usage
from course_utils.tools.notebooks.chapters import (
    APPENDIX,
    Step,
    chapters,
    read_appendix,
    read_step,
)
from course_utils.tools.notebooks.pages import instructor_page, landing_page
from course_utils.tools.notebooks.site import site_notebook

UNIT_TITLE = "Communication-efficient algorithms"
# the first line of each notebook's first markdown cell: "# Step N — title"
INSTALL_HINT = 'install the book tools with: pip install -e ".[book]"'
MATHJAX_DIR = "mathjax"  # under the site's _static/
MATHJAX_PACKAGE = "sphinx-mathjax-offline"  # MathJax 3, its fonts included
MATHJAX_SCRIPT = "tex-chtml.js"  # TeX in, HTML with CSS out (math on the text's baseline)
ASSETS = "_book_assets"  # source folder whose contents Sphinx copies to _static/
BUILD_TIMEOUT = 600  # seconds
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours in Sphinx's output
# the first line of a failed build's output that says why, e.g. "KeyError: 'x'"
REASON = re.compile(r"[\w.]*(Error|Exception): \S|Could ?n[o']t |Cannot ")
CSS_NAME, FAVICON_NAME = "course-book.css", "favicon.svg"
# code at 13 px (88 columns fit the text column of a laptop screen; on a phone a code block
# scrolls), outputs wrapped so that none scrolls sideways, one search box where the sidebar
# shows its own, figures never wider than the column
CSS = """\
div.cell_input pre { font-size: 13px; padding: 0.6rem; }
.bd-main .bd-content .bd-article-container .bd-article { padding-left: 1rem;
  padding-right: 1rem; }
div.cell_output pre, div.output pre { font-size: 13px; white-space: pre-wrap;
  overflow-wrap: anywhere; }
article img { max-width: 100%; height: auto; }
article table { width: 100%; table-layout: auto; }
article table td, article table th { overflow-wrap: anywhere; }
@media (min-width: 960px) {
  .bd-header .navbar-persistent--container, .bd-header .navbar-persistent--mobile {
    display: none !important; }
}
"""
FOOTER = ("<p>Communication-efficient algorithms (unit distributed-03). Code: MIT licence "
          "(the repository's LICENSE); notebooks and prose: "
          '<a href="https://creativecommons.org/licenses/by/4.0/">CC BY 4.0</a> '
          "(notebooks/LICENSE.md).</p>")
# four devices in the colours JAX uses to draw them; a favicon also stops /favicon.ico requests
FAVICON = """\
<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">
<rect x="1" y="1" width="6" height="6" fill="#393b79"/><rect x="9" y="1" width="6" height="6" \
fill="#de9ed6"/><rect x="1" y="9" width="6" height="6" fill="#ad494a"/><rect x="9" y="9" \
width="6" height="6" fill="#b5cf6b"/></svg>
"""

@dataclass(frozen=True)
class Site:
    """A built site: its steps and the build's warnings (the log is kept only if there are any)."""

    steps: list[Step]
    warnings: list[str]
    log: Path | None


def mathjax_root() -> Path:
    """The folder of MathJax 3 files shipped by ``sphinx-mathjax-offline``.

    Raises:
        CourseError: the package is not installed.
    """
    spec = importlib.util.find_spec(MATHJAX_PACKAGE)
    root = Path(spec.origin).parent / "static" / "mathjax" if spec and spec.origin else None
    if root is None or not (root / MATHJAX_SCRIPT).is_file():
        raise usage(f"MathJax ({MATHJAX_PACKAGE}) is not installed; {INSTALL_HINT}")
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
            "extra_footer": FOOTER,
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
                "mathjax_path": f"{MATHJAX_DIR}/{MATHJAX_SCRIPT}",
                "mathjax3_config": {
                    "tex": {"inlineMath": [["\\(", "\\)"]],
                            "displayMath": [["\\[", "\\]"]]},
                    "options": {
                        "processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"
                    },
                },
                "extensions": extensions,
            },
        },
    }


def write_source(steps: list[Step], source: Path, mathjax: Path,
                 appendices: list[Step] = (), *, instructor: bool = False) -> None:
    """Lay out the book's source folder: the notebooks as the site shows them
    (:func:`site.site_notebook`), the landing page, config, TOC, MathJax.

    Args:
        steps: the notebooks to copy, in order.
        source: an empty folder to write into.
        mathjax: the MathJax folder to copy, see :func:`mathjax_root`.
        appendices: appendix notebooks (:func:`read_appendix`), copied to ``appendix/``.
        instructor: the instructor site, with the solutions; else the student site.
    """
    if appendices:
        (source / APPENDIX).mkdir()
    for step, folder in [(s, source) for s in steps] + [(a, source / APPENDIX)
                                                         for a in appendices]:
        nb = nbformat.read(step.path, as_version=4)
        nbformat.write(site_notebook(nb, instructor=instructor), folder / step.path.name)
    (source / "index.md").write_text(landing_page(UNIT_TITLE, steps), encoding="utf-8")
    (source / "instructors.md").write_text(instructor_page(steps), encoding="utf-8")
    # YAML is a superset of JSON: no quoting rules to get wrong
    (source / "_config.yml").write_text(json.dumps(book_config(), indent=2), encoding="utf-8")
    toc = {"format": "jb-book", "root": "index",
           "chapters": [*chapters(steps, list(appendices)), {"file": "instructors"}]}
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


def build(folder: Path, out: Path, on_start: Callable[[str], object] | None = None, *,
          instructor: bool = False) -> Site:
    """Build the site of the step notebooks in ``folder`` and put its HTML in ``out``.

    Args:
        folder: the step notebooks (``NN_name.ipynb``) with their committed outputs.
        out: the site's folder; a site built there before is replaced, other files are not.
        on_start: called with one line once the input is checked and the build starts.
        instructor: the instructor site, with the solutions (default: the student site).

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
        edition = "instructor" if instructor else "student"
        on_start(f"building the {edition} site of {len(steps)} steps with Jupyter Book "
                 "(committed outputs)")
    handle, name = tempfile.mkstemp(prefix="course-book-", suffix=".log")
    os.close(handle)
    log = Path(name)
    with tempfile.TemporaryDirectory(prefix="course-book-") as tmp:
        source = Path(tmp) / "book"
        source.mkdir()
        write_source(steps, source, mathjax, appendices, instructor=instructor)
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
        site = build(Path(args.folder), out, on_start=print, instructor=args.instructor)
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
    book.add_argument("--instructor", action="store_true",
                      help="the instructor site: the solutions and their outputs too (default: "
                      "the student site, each exercise as the student edition has it)")
    book.set_defaults(handler=_run_book)

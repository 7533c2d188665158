"""``course book``: the static site of the series, read in headless Chromium with no network.

The site is built once (Jupyter Book, committed outputs) and served from 127.0.0.1: in the
end-to-end tests (``pytest -m e2e``; the README's ``pytest`` leaves them out, CI runs them as a
step of their own), of the first step (no math, no figure), step 03 (math, one figure) and the
last (two figures); with ``COURSE_ALL_NOTEBOOKS=1`` (``scripts/test_all_notebooks.sh
--release``) of every step. Every page must show its title and every figure its notebook has,
log no console error, resolve every internal link, render its math, show code cells without
sideways scrolling, and send no request anywhere but 127.0.0.1. Chromium is Debian's package
(/usr/bin/chromium) driven by playwright; no browser is ever downloaded. Without it, run
``pytest -m "e2e and not browser"``; in CI (``CI`` set) a missing Chromium is a failure, not a
skip.
"""

import base64
import functools
import http.server
import re
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest
from chromium import CHROMIUM, CHROMIUM_ARGS, require_chromium
from sample import ALL, sample

from course_utils.tools.launch.command import free_port
from course_utils.tools.notebooks import book

ROOT = Path(__file__).resolve().parents[1]
SERIES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
NOTEBOOKS = sample(SERIES, {"01", "03", "17"})  # the steps the site is built of

HOST = "127.0.0.1"
# a laptop screen: the theme's own code font would need sideways scrolling for 88 columns here
VIEWPORT = {"width": 1280, "height": 800}
CODE_COLUMNS = 88
# Sphinx's math nodes, and what MathJax puts in each once it is rendered
MATH = "span.math.notranslate, div.math.notranslate"
# a script, stylesheet, icon or font with a remote address
REMOTE = re.compile(
    r"<(script|link|img|iframe)\b[^>]*\b(src|href)=[\"']?(https?:)?//[^>]*>|url\([\"']?(https?:)?//"
)
RENDERED = f"[...document.querySelectorAll('{MATH}')].filter(e => e.querySelector('.MathJax'))"

pytestmark = pytest.mark.browser


def _heading(nb) -> str:
    """The text of a notebook's first markdown heading (``# Step N — title``)."""
    first = next(c for c in nb.cells if c.cell_type == "markdown" and c.source.strip())
    line = first.source.strip().splitlines()[0]
    assert line.startswith("# Step "), line
    return line[2:].strip()


def _png_sizes(nb) -> list[list[int]]:
    """Width and height of every image/png output, in order (read from each PNG's header)."""
    sizes = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {}).get("image/png")
            if data:
                header = base64.b64decode("".join(data))[:24]
                assert header[:8] == b"\x89PNG\r\n\x1a\n"
                sizes.append(list(struct.unpack(">II", header[16:24])))
    return sizes


CODE_SPAN = re.compile(r"`[^`]*`")  # a $ inside code (`$XDG_CACHE_HOME`) is not math


def _pages() -> list[tuple[str, str, list[list[int]], bool]]:
    """Each page of the site: file, title, sizes of its figures, whether its notebook has math."""
    pages = [("index.html", book.UNIT_TITLE, [], False)]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        math = any(
            "$" in CODE_SPAN.sub("", c.source) for c in nb.cells if c.cell_type == "markdown"
        )
        pages.append((f"{path.stem}.html", _heading(nb), _png_sizes(nb), math))
    return pages


PAGES = _pages()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("book") / "site"
    folder = ROOT / "notebooks"
    if not ALL:
        folder = tmp_path_factory.mktemp("steps")
        for path in NOTEBOOKS:
            (folder / path.name).write_bytes(path.read_bytes())
        (folder / "appendix").mkdir()  # the appendix after 17, which the sample has
        for path in (ROOT / "notebooks" / "appendix").glob("*.ipynb"):
            (folder / "appendix" / path.name).write_bytes(path.read_bytes())
    start = time.perf_counter()
    built = book.build(folder, out)
    print(f"site built in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return out, built


# every request the site's server could not serve (a missing asset, a lazily loaded MathJax file)
NOT_SERVED: list[str] = []


@pytest.fixture(scope="module")
def server(site):
    out, _ = site

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send_error(self, code, *args, **kwargs):
            NOT_SERVED.append(f"{code} {self.path}")
            super().send_error(code, *args, **kwargs)

    httpd = http.server.ThreadingHTTPServer(
        (HOST, free_port()), functools.partial(Quiet, directory=str(out))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://{HOST}:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@dataclass
class Visit:
    """One page opened in the browser, and what went wrong while it loaded."""

    page: object
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    remote: list[str] = field(default_factory=list)  # requests for anything not on 127.0.0.1
    first_not_served: int = field(default_factory=lambda: len(NOT_SERVED))

    def assert_clean(self) -> None:
        """Once the page is idle: no console error, no remote request, nothing missing."""
        self.page.wait_for_load_state("networkidle")
        assert self.errors == []
        assert self.remote == []
        assert NOT_SERVED[self.first_not_served :] == []


@pytest.fixture
def open_page(browser, server):
    """Open a page of the site in a new browser context, blocking every non-local request."""
    pages = []

    def go(name: str) -> Visit:
        visit = Visit(browser.new_page(viewport=VIEWPORT))
        pages.append(visit.page)
        visit.page.on("console", lambda m: visit.errors.append(m.text) if m.type == "error" else 0)
        visit.page.on("pageerror", lambda e: visit.errors.append(f"uncaught: {e}"))

        def local_only(route):
            if urlparse(route.request.url).hostname == HOST:
                route.continue_()
            else:
                visit.remote.append(route.request.url)
                route.abort()

        visit.page.route("**/*", local_only)
        response = visit.page.goto(f"{server}/{name}", wait_until="load")
        assert response is not None and response.status == 200, name
        return visit

    yield go
    for page in pages:
        page.close()


@pytest.mark.e2e
def test_the_build_has_no_warnings(site):
    _, built = site
    assert [s.path.name for s in built.steps] == [p.name for p in NOTEBOOKS]
    assert built.warnings == [], f"first warning: {built.warnings[0]}; log: {built.log}"


@pytest.mark.e2e
def test_the_site_has_a_page_per_step_and_fetches_nothing_remote(site):
    out, _ = site
    steps = sorted(p.name for p in out.glob("[0-9][0-9]_*.html"))
    assert steps == [f"{p.stem}.html" for p in NOTEBOOKS]
    assert (out / "index.html").is_file() and (out / "_static/mathjax/tex-chtml.js").is_file()
    # scripts, stylesheets, icons and fonts all come from the site itself
    remote = [
        f"{path.relative_to(out)}: {match.group(0)}"
        for path in [*out.rglob("*.html"), *out.rglob("*.css")]
        for match in REMOTE.finditer(path.read_text(encoding="utf-8"))
    ]
    assert remote == []


@pytest.mark.e2e
def test_the_landing_page_lists_every_step_by_part(open_page):
    from course_utils.tools.notebooks.outline import outline_step, parts

    visit = open_page("index.html")
    page = visit.page
    rows = page.locator("article table tbody tr")
    assert rows.count() == len(NOTEBOOKS)
    for index, path in enumerate(NOTEBOOKS):
        number, title = PAGES[index + 1][1].removeprefix("Step ").split(" — ", 1)
        cells = rows.nth(index).locator("td")
        assert cells.nth(0).inner_text().strip() == number
        link = cells.nth(1).locator("a")
        assert link.inner_text().strip() == title
        assert link.get_attribute("href") == f"{path.stem}.html"
        assert cells.nth(2).inner_text().strip() == outline_step(int(number)).line.replace("`", "")
    headings = page.locator("article h2").all_inner_texts()
    shown = [outline_step(int(p.name[:2])) for p in NOTEBOOKS]
    assert [h.strip() for h in headings] == [part for part, _ in parts(shown)]
    text = page.locator("article").inner_text()
    for words in ("Who it is for.", "How to start.", "course student --out student/",
                  "jupyter lab student/"):
        assert words in text
    assert '.[dev]' not in text  # a student installs the course, not the test tools
    assert page.locator("article a[href='instructors.html']").count() == 1
    visit.assert_clean()


@pytest.mark.e2e
def test_the_instructor_page_lists_each_exercise_and_no_solution(site, open_page):
    visit = open_page("instructors.html")
    text = visit.page.locator("article").inner_text()
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if "check" in cell.metadata.get("tags", []):
                assert re.search(r"check_\w+", cell.source)[0] in text
    assert not any(line in text for line in _solution_lines())
    visit.assert_clean()


def _solution_lines() -> set[str]:
    """The lines of every reference solution in the site's notebooks that are long enough to be
    the answer's own (not a blank, a bracket or a comment alone)."""
    lines = set()
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if "solution" not in cell.metadata.get("tags", []):
                continue
            region = cell.source.split("### BEGIN SOLUTION")[-1].split("### END SOLUTION")[0]
            lines |= {line.strip() for line in region.splitlines()
                      if len(line.strip()) >= 12 and not line.strip().startswith("#")}
    return lines


@pytest.mark.e2e
@pytest.mark.parametrize(
    "name, title, figures, has_math", PAGES, ids=[name.removesuffix(".html") for name, *_ in PAGES]
)
def test_page(site, server, open_page, name, title, figures, has_math):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    out, _ = site
    visit = open_page(name)
    page = visit.page

    # the title: the notebook's "# Step N — ..." heading (the unit's title on the landing page)
    h1 = page.locator("article h1").first
    assert h1.is_visible()
    shown = h1.evaluate(
        "h => [...h.childNodes].filter(n => !n.classList?.contains('headerlink'))"
        ".map(n => n.textContent).join('').trim()"
    )
    assert shown == title
    assert page.title().startswith(title)

    # every image/png output of the notebook, loaded, at the size the notebook stores
    try:
        page.wait_for_function("() => [...document.images].every(i => i.complete)",
                               timeout=120_000)
    except PlaywrightTimeout:
        pytest.fail("timed out: the page's images did not finish loading in 120 s")
    images = page.locator("article img")
    assert images.count() == len(figures)
    sizes = images.evaluate_all("imgs => imgs.map(i => [i.naturalWidth, i.naturalHeight])")
    assert sizes == figures
    assert all(width > 0 for width, _ in sizes)

    # math: rendered by the site's own MathJax
    math = page.locator(MATH).count()
    assert (math > 0) == has_math
    try:
        page.wait_for_function(f"() => {RENDERED}.length === {math}", timeout=120_000)
    except PlaywrightTimeout:
        rendered = page.evaluate(f"() => {RENDERED}.length")
        pytest.fail(f"timed out: MathJax rendered {rendered} of {math} formulas in 120 s")
    assert page.locator("mjx-merror, .MathJax_Error, merror").count() == 0

    # code cells fit the column and outputs wrap: no sideways scrolling; code at 13 px or more
    wide = page.locator("div.cell_input pre, div.cell_output pre").evaluate_all(
        "pres => pres.filter(p => p.scrollWidth > p.clientWidth).map(p => p.textContent)"
    )
    assert wide == []
    sizes = page.locator("div.cell_input pre").evaluate_all(
        "pres => pres.map(p => parseFloat(getComputedStyle(p).fontSize))")
    assert all(size >= 13 for size in sizes)
    # figures at the text column's width (60 % at least), each with its alt text
    column = page.locator("article section").first.evaluate("s => s.clientWidth")
    shown = images.evaluate_all("imgs => imgs.map(i => [i.clientWidth, i.alt])")
    assert all(width >= 0.6 * column and alt for width, alt in shown), (column, shown)
    # the student site: no line of a reference solution, no check's output, no harness cell
    text = page.locator("article").inner_text()
    assert [line for line in _solution_lines() if line in text] == []
    assert "PASSED: " not in text and "PASS: " not in text and "N_DEVICES = 4" not in text
    # one search box
    boxes = page.locator(".search-button-field").evaluate_all(
        "bs => bs.filter(b => b.offsetParent !== null).length")
    assert boxes == 1

    # internal links lead to pages of the site; its scripts, styles, images and icon are files
    links = page.locator("a[href]").evaluate_all("links => links.map(a => a.href)")
    pages = {unquote(urlparse(h).path) for h in links if h.startswith(server + "/")}
    pages = {p for p in pages if p.endswith(".html")}
    assert len(pages) >= len(NOTEBOOKS) + 1  # the navigation lists the landing page and every step
    assets = page.locator("link[href], script[src], img[src]").evaluate_all(
        "tags => tags.map(t => t.href || t.src)"
    )
    assert all(a.startswith(server + "/") for a in assets), assets
    assert page.locator("link[rel='icon']").count() == 1  # no request for /favicon.ico
    files = pages | {unquote(urlparse(a).path) for a in assets}
    missing = sorted(f for f in files if not (out / f.lstrip("/")).is_file())
    assert missing == []

    visit.assert_clean()


@pytest.mark.e2e
@pytest.mark.parametrize("name", [p[0] for p in PAGES] + ["instructors.html"])
def test_on_a_phone_no_page_is_wider_than_the_screen(browser, server, name):
    page = browser.new_page(viewport={"width": 420, "height": 800})
    try:
        page.goto(f"{server}/{name}", wait_until="load")
        wider = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert wider <= 0
        # a table is judged by the box it sits in (the theme wraps each in a scroll container)
        outputs = page.locator("div.cell_output pre, article table").evaluate_all(
            "els => els.map(e => e.tagName === 'TABLE' ? e.parentElement : e)"
            ".filter(e => e.scrollWidth > e.clientWidth + 1).length")
        assert outputs == 0  # only code blocks may scroll sideways on a phone
    finally:
        page.close()


def test_code_lines_fit_the_page():
    long = [
        f"{path.name}, cell {index}: {len(line)} columns: {line[:40]}..."
        for path in SERIES  # no site needed: every step
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells)
        if cell.cell_type == "code"
        for line in cell.source.splitlines()
        if len(line) > CODE_COLUMNS
    ]
    assert long == []


def test_the_appendix_follows_its_step_on_the_site():
    notebooks = ROOT / "notebooks"
    appendix = book.read_appendix(notebooks / "appendix" / "cluster_method.ipynb")
    steps = [book.read_step(p) for p in SERIES]
    toc = [c["file"] for c in book.chapters(steps, [appendix])]
    assert toc[toc.index("17_simulated_cluster") + 1] == "appendix/cluster_method"
    with pytest.raises(book.CourseError, match="Appendix to step N"):
        book.read_appendix(SERIES[0])


def test_a_folder_without_notebooks(course, tmp_path):
    status, output = course("book", "--out", str(tmp_path / "site"), "--folder", str(tmp_path))
    assert status == 2 and "root folder" in output and "--folder" in output
    assert len(output.strip().splitlines()) == 1 and output.startswith("course book: error: ")
    assert not (tmp_path / "site").exists()


def test_without_jupyter_book(course, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "jupyter_book", None)  # as if it were not installed
    status, output = course("book", "--out", str(tmp_path / "site"), cwd=ROOT)
    assert status == 2 and 'pip install -e ".[book]"' in output
    assert len(output.strip().splitlines()) == 1 and "Traceback" not in output
    assert not (tmp_path / "site").exists()


def test_the_site_never_goes_into_the_notebooks_folder(course):
    status, output = course("book", "--out", "notebooks/site", cwd=ROOT)
    assert status == 2 and "choose another --out" in output
    assert len(output.strip().splitlines()) == 1
    assert not (ROOT / "notebooks" / "site").exists()


@pytest.mark.e2e
def test_a_failed_build_says_why_in_one_line(course, monkeypatch, tmp_path):
    config = book.book_config()
    config["sphinx"]["config"]["extensions"].append("no_such_extension")
    monkeypatch.setattr(book, "book_config", lambda: config)
    status, output = course("book", "--out", str(tmp_path / "site"), cwd=ROOT)
    lines = output.strip().splitlines()
    assert status == 1 and len(lines) == 2  # "building ..." on stdout, the error on stderr
    assert lines[1].startswith("course book: error: Jupyter Book failed (exit status 1): ")
    assert "Could not import extension no_such_extension" in lines[1]
    log = Path(lines[1].rsplit("; log: ", 1)[1])
    assert "no_such_extension" in log.read_text()
    log.unlink()
    assert not (tmp_path / "site").exists()


def test_the_instructor_site_is_laid_out_from_the_solutions(course, monkeypatch, tmp_path):
    laid_out = {}

    def stop_before_sphinx(source, output, log):
        for name in ("03_collectives.ipynb", "instructors.md", "index.md"):
            laid_out[name] = (source / name).read_text(encoding="utf-8")
        raise book.CourseError("stopped before Sphinx", 1)

    monkeypatch.setattr(book, "run_jupyter_book", stop_before_sphinx)
    for flag, solution_shown in (["--instructor"], True), ([], False):
        status, output = course("book", "--out", str(tmp_path / "site"), *flag, cwd=ROOT)
        assert status == 1 and "stopped before Sphinx" in output
        assert ("### BEGIN SOLUTION" in laid_out["03_collectives.ipynb"]) == solution_shown
        assert ("instructor site" in output) == solution_shown
        assert "check_reduce_scatter" in laid_out["instructors.md"]
        assert "instructors.md" in laid_out["index.md"]

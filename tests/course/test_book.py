"""The book (issue "classroom", item 4): ``make book`` (course/book.py, ``trgrpo course book``) builds a Sphinx
site with myst-nb and sphinx-book-theme from executed notebooks, without re-executing them. One build of the
committed notebooks (notebook 08's answer cell given a stored output, as ``make run`` leaves it), shared by the
tests: titles, sidebar, previous/next, a download per notebook, 08 without code, every link resolving; then
headless Chromium over 127.0.0.1: the math rendered by the site's own MathJax (no raw ``$…$``, no request
elsewhere), search finding a term of notebook 02, the landing page's forest plot."""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import re
import shutil
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from course import book, cli
from tests.notebooks.test_lab_browser import CHROMIUM, CHROMIUM_ARGS, _require_browser

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ANSWER = "TR-GRPO against GRPO, the stored answer of make run"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The book of the committed notebooks, 08's answer cell with a stored output: (folder, seconds to build)."""
    tmp = tmp_path_factory.mktemp("book")
    executed = tmp / "executed"
    executed.mkdir()
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        if path.name.startswith("08_"):
            answer = next(c for c in nb["cells"] if c["cell_type"] == "code" and "verdict_rows" in "".join(c["source"]))
            answer["outputs"] = [{"output_type": "stream", "name": "stdout", "text": [ANSWER + "\n"]}]
        (executed / path.name).write_text(json.dumps(nb))
    t0 = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        status = book.build(executed, tmp / "site", [p.name for p in NOTEBOOKS])  # in-process: no second start-up
    assert status == 0 and "WARNING" not in err.getvalue(), err.getvalue()[-3000:]
    return tmp / "site", time.monotonic() - t0


def _pages(site: Path) -> dict[str, str]:
    return {p.relative_to(site).as_posix(): p.read_text() for p in site.rglob("*.html") if "_static" not in p.parts}


@pytest.mark.browser
def test_every_page_has_its_title_the_sidebar_prev_next_and_a_download(site):
    site, seconds = site
    pages = _pages(site)
    print(f"\nbook build: {seconds:.1f} s")
    for path in NOTEBOOKS:
        html = pages[f"notebooks/{path.stem}.html"]
        heading = json.loads(path.read_text())["cells"][0]["source"][0].lstrip("# ").strip()
        title = re.search(r"<title>(.*?)</title>", html).group(1)
        assert title.startswith(heading.replace("&", "&amp;").split(" — ")[0]), (path.name, title)
        assert (
            f'href="../_sources/notebooks/{path.name}"' in html and (site / "_sources/notebooks" / path.name).is_file()
        )
        sidebar = html.split('class="bd-sidebar-primary', 1)[1].split("</nav>", 1)[0]
        others = [p.stem for p in NOTEBOOKS if p != path]
        assert [o for o in others if f'href="{o}.html"' not in sidebar] == [], f"{path.name}: the sidebar lacks a page"
        assert 'class="left-prev"' in html or 'class="right-next"' in html, f"{path.name}: no previous/next"
    answer_page = pages["notebooks/08_results_vs_paper.html"]
    assert ANSWER in answer_page and "cell_input" not in answer_page, "08: the answer, without its code"
    assert "cell_input" in pages["notebooks/02_token_weight_function.html"]


@pytest.mark.browser
def test_every_notebook_page_has_a_launch_button_to_its_notebook_in_jupyterlab(site):
    """The theme's launch group (the rocket) on each notebook page, one link to that notebook in make lab's
    JupyterLab (book.LAUNCH_URL); none on the other pages."""
    site, _ = site
    pages = _pages(site)
    for path in NOTEBOOKS:
        html = pages[f"notebooks/{path.stem}.html"]
        group = html.split('class="dropdown dropdown-launch-buttons"', 1)[1].split("</div>", 1)[0]
        assert re.findall(r'href="([^"]+)"', group) == [f"{book.LAUNCH_URL}/notebooks/{path.name}"], path.name
    assert [p for p, h in pages.items() if not p.startswith("notebooks/") and "dropdown-launch-buttons" in h] == []


@pytest.mark.slow  # notebook 02 run headless as make run runs it (papermill, ~30 s on 2 busy cores), then its page
def test_the_book_shows_the_explorer_as_its_figure_from_the_executed_outputs(tmp_path, monkeypatch):
    """Where notebook 02 shows its widget, the book shows the panels the widget draws at the notebook's parameters:
    the image the headless run stored in that cell (it said "headless run (TRGRPO_HEADLESS=1) ..." instead)."""
    from tests.nbexec import execute_smoke

    name = "02_token_weight_function.ipynb"
    for d in ("work", "executed"):
        (tmp_path / d).mkdir()
    shutil.copy2(ROOT / "notebooks" / name, tmp_path / "work" / name)  # its records and figures go to tmp_path
    monkeypatch.setenv("TRGRPO_FIGURES", str(tmp_path / "figures"))
    execute_smoke(tmp_path / "work" / name, tmp_path / "executed" / name, monkeypatch, timeout=300)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        assert book.build(tmp_path / "executed", tmp_path / "site", [name]) == 0, err.getvalue()[-3000:]
    html = (tmp_path / "site" / "notebooks" / "02_token_weight_function.html").read_text()
    cell = html.split("tag_widget", 1)[1].split('<div class="cell ', 1)[0]  # to the next cell (not cell_output)
    images = re.findall(r'<img[^>]+src="([^"]+)"', cell)
    assert len(images) == 1 and (tmp_path / "site" / "notebooks" / images[0]).resolve().is_file(), images
    assert "the live explorer is left out" not in html and "widget-view" not in html


@pytest.mark.browser
def test_every_link_of_the_book_resolves(site):
    """Every href and src of every page names a file of the site (anchors aside); none leaves it but http(s) links
    a reader clicks."""
    site, _ = site
    dead = []
    for name, html in _pages(site).items():
        for link in re.findall(r'(?:href|src)="([^"]+)"', html):
            if link.startswith(("http://", "https://", "mailto:", "data:", "#", "javascript:")):
                continue
            path = unquote(urlsplit(link).path)
            if path and not (site / name).parent.joinpath(path).resolve().exists():
                dead.append(f"{name}: {link}")
    assert dead == []


@pytest.fixture(scope="module")
def served(site):
    """The site over HTTP on 127.0.0.1 (as a reader's browser sees it), and a Chromium page that records every
    request it makes."""
    _require_browser()
    from playwright.sync_api import sync_playwright

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site[0]))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page()
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.set_default_timeout(60_000)
        yield base, page, requests
        browser.close()
    server.shutdown()


@pytest.mark.browser
def test_a_page_shows_its_math_rendered_offline(served):
    base, page, requests = served
    requests.clear()
    page.goto(f"{base}/notebooks/02_token_weight_function.html", wait_until="load")
    page.wait_for_function("document.querySelectorAll('mjx-container').length > 10")
    text = page.evaluate(
        """() => { const a = document.querySelector('article').cloneNode(true);
                   a.querySelectorAll('pre, code, mjx-container, .cell_output').forEach(e => e.remove());
                   return a.innerText; }"""
    )
    assert not re.search(r"\$[^$\s][^$\n]*\$", text), re.findall(r"\$[^$\s][^$\n]*\$", text)[:5]
    assert any("/_static/mathjax/" in u for u in requests)
    assert [u for u in requests if not u.startswith(base) and not u.startswith("data:")] == []


@pytest.mark.browser
def test_search_finds_a_term_of_notebook_02(served):
    base, page, requests = served
    requests.clear()
    page.goto(f"{base}/search.html?q=Kantorovich", wait_until="load")
    page.wait_for_function("document.querySelectorAll('#search-results li a').length > 0")
    hits = page.eval_on_selector_all("#search-results li a", "els => els.map(e => e.getAttribute('href'))")
    assert any("02_token_weight_function" in h for h in hits), hits
    assert [u for u in requests if not u.startswith(base) and not u.startswith("data:")] == []


@pytest.mark.browser
def test_the_landing_page_shows_the_answer_and_its_forest_plot(served):
    base, page, _ = served
    page.goto(f"{base}/index.html", wait_until="load")
    width = page.eval_on_selector("img[src*='08_answer_forest']", "img => img.complete ? img.naturalWidth : 0")
    assert width > 100
    text = page.inner_text("article")
    assert "notebook 08" in text and "What we found so far" in text


def test_book_without_the_executed_notebooks_stops_in_one_line(tmp_path, capsys):
    assert cli.main(["book", "--executed", str(tmp_path / "none"), "--out", str(tmp_path / "b")]) == 2
    out = capsys.readouterr().out
    assert out.startswith("book: not in ") and "make run" in out and len(out.splitlines()) == 1
    assert not (tmp_path / "b").exists()

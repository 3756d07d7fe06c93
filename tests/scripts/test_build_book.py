"""The rendered book (issue "course"): ``make book`` (scripts/build_book.py) turns executed notebooks into HTML
pages without re-executing them. A small book of two notebooks: a figure and a table are in the pages, every
internal link resolves, the answer page hides its code; then headless Chromium renders a page (browser tier)."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
ROOT = Path(__file__).resolve().parents[2]
PNG = base64.b64encode(
    base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
).decode()
TABLE = "| arm | Δ |\n|---|---|\n| TR | +0.01 |"


def _executed(folder: Path) -> None:
    """Two executed notebooks as `make run` leaves them: outputs stored, links to each other and to the docs."""
    v4 = nbformat.v4
    folder.mkdir(parents=True)
    for name, other in (("01_a.ipynb", "08_b.ipynb"), ("08_b.ipynb", "01_a.ipynb")):
        code = v4.new_code_cell("show()", execution_count=1)
        code.outputs = [
            v4.new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"}),
            v4.new_output("display_data", data={"text/markdown": TABLE, "text/plain": TABLE}),
        ]
        md = f"# Page {name[:2]}\n\nNext: [{other}]({other}); terms: [glossary](../docs/glossary.md)."
        nbformat.write(v4.new_notebook(cells=[v4.new_markdown_cell(md), code]), str(folder / name))


def _build(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    _executed(tmp_path / "executed")
    out = tmp_path / "book"
    cmd = [sys.executable, "scripts/build_book.py", "--executed", str(tmp_path / "executed"), "--out", str(out)]
    r = subprocess.run([*cmd, "01_a.ipynb", "08_b.ipynb"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    return r, out


@pytest.mark.slow  # 16 s on 2 busy cores (nbconvert's exporter and templates load)
def test_book_pages_hold_the_outputs_and_their_links_resolve(tmp_path):
    r, out = _build(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    pages = {p.name: p.read_text() for p in out.glob("*.html")}
    assert set(pages) == {"01_a.html", "08_b.html", "syllabus.html", "glossary.html", "index.html"}
    for name in ("01_a.html", "08_b.html"):
        assert 'src="data:image/png;base64,' in pages[name] and "<table" in pages[name], name
    code = '<span class="n">show</span>'
    assert code in pages["01_a.html"] and code not in pages["08_b.html"], "08's code cells are hidden"
    for name, html in pages.items():
        for link in re.findall(r'href="([^"#]+)(?:#[^"]*)?"', html):
            if "://" in link or link.startswith(("mailto:", "data:")) or not link.endswith(".html"):
                continue
            assert (out / link).is_file(), f"{name}: {link}"
    assert "01_a.html" in pages["index.html"] and "glossary.html" in pages["01_a.html"]


def test_book_without_the_executed_notebooks_stops_in_one_line(tmp_path):
    cmd = [sys.executable, "scripts/build_book.py", "--executed", str(tmp_path / "none"), "--out", str(tmp_path / "b")]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout.startswith("book: not in ") and "make run" in r.stdout
    assert "Traceback" not in r.stderr and not (tmp_path / "b").exists()


@pytest.mark.slow  # 23 s on 2 busy cores
@pytest.mark.browser
@pytest.mark.skipif(os.environ.get("TRGRPO_SKIP_BROWSER") == "1", reason="TRGRPO_SKIP_BROWSER=1")
def test_book_page_renders_in_headless_chromium(tmp_path):
    """Chromium loads a page of the small book: its DOM after rendering holds the figure and the table."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no chromium (make browser installs it)")
    r, out = _build(tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
            "--virtual-time-budget=5000", "--dump-dom", (out / "01_a.html").as_uri()]  # fmt: skip
    dom = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout
    assert "<img" in dom and "data:image/png;base64," in dom and "<table" in dom and "08_b.html" in dom, dom[-2000:]

"""``make book``: the course as static HTML pages from ``make run``'s executed notebooks (runs/make-run/, no
re-execution), with the syllabus and the glossary, by nbconvert's HTML exporter (docs/design.md, section 5).

Links between the pages are retargeted (``NN_x.ipynb`` -> ``NN_x.html``, ``docs/*.md`` -> ``*.html``); the answer
page (08) is shown without its code cells. A notebook missing from the executed folder stops the build in one
line (exit 2, nothing written): run ``make run`` first.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"syllabus": ROOT / "docs" / "syllabus.md", "glossary": ROOT / "docs" / "glossary.md"}
HIDE_CODE = ("08_",)  # pages read for their results: code cells hidden
LINK_RE = re.compile(r"\[([^\]]*)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def _target(link: str) -> str:
    """A link of a notebook or a docs page, as it reads in the book."""
    if "://" in link or link.startswith("mailto:"):
        return link
    name = Path(link).name
    if name.endswith(".ipynb"):
        return name[: -len(".ipynb")] + ".html"
    if name == "README.md":
        return "index.html"
    if name.endswith(".md") and name[:-3] in PAGES:
        return name[:-3] + ".html"
    return link


def _relink(nb, pages: set[str]) -> None:
    """Retarget the markdown links of ``nb`` for the book; a link to a page the book does not hold becomes text."""

    def sub(m: re.Match) -> str:
        target = _target(m.group(2))
        if target.endswith(".html") and "://" not in target and target not in pages:
            return m.group(1)
        return f"[{m.group(1)}]({target}{m.group(3) or ''})"

    for c in nb.cells:
        if c.cell_type == "markdown":
            c.source = LINK_RE.sub(sub, c.source)


def build(executed: Path, out: Path, names: list[str]) -> list[Path]:
    """Write the book into ``out``: one page per notebook of ``names`` (file names in ``executed``), the syllabus,
    the glossary and an index; the pages written."""
    missing = [n for n in names if not (executed / n).is_file()]
    if missing:
        raise FileNotFoundError(f"not in {executed}: {', '.join(missing)} (run `make run` first)")
    import nbformat
    from nbconvert import HTMLExporter

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    written, toc = [], []
    pages = {f"{Path(n).stem}.html" for n in names} | {f"{p}.html" for p in PAGES} | {"index.html"}
    for name in names:
        nb = nbformat.read(str(executed / name), as_version=4)
        _relink(nb, pages)
        exporter = HTMLExporter(template_name="lab", exclude_input=name.startswith(HIDE_CODE))
        html, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": Path(name).stem}})
        written.append(out / f"{Path(name).stem}.html")
        written[-1].write_text(html)
        title = next((c.source.splitlines()[0].lstrip("# ") for c in nb.cells if c.cell_type == "markdown"), name)
        toc.append((written[-1].name, title))
    for page, path in PAGES.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(path.read_text())])
        _relink(nb, pages)
        html, _ = HTMLExporter(template_name="lab").from_notebook_node(nb, resources={"metadata": {"name": page}})
        written.append(out / f"{page}.html")
        written[-1].write_text(html)
        toc.append((written[-1].name, page.capitalize()))
    items = "\n".join(f"- [{title}]({href})" for href, title in toc)
    index = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# The trgrpo course\n\n{items}\n")])
    html, _ = HTMLExporter(template_name="lab").from_notebook_node(index, resources={"metadata": {"name": "index"}})
    written.append(out / "index.html")
    written[-1].write_text(html)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executed", default=str(ROOT / "runs" / "make-run"), help="make run's executed notebooks")
    ap.add_argument("--out", default=str(ROOT / "build" / "book"))
    ap.add_argument("names", nargs="*", help="notebook file names (default: every main notebook)")
    args = ap.parse_args(argv)
    names = args.names or [p.name for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
    try:
        written = build(Path(args.executed), Path(args.out), names)
    except FileNotFoundError as e:
        print(f"book: {e}")
        return 2
    print(f"wrote {len(written)} pages into {args.out}; open {Path(args.out) / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

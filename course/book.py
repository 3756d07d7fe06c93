"""``make book`` (``trgrpo course book``): the course as a book, from ``make run``'s executed notebooks
(runs/make-run/, no re-execution), by Sphinx with myst-nb and sphinx-book-theme (docs/design.md, section 5): a
sidebar of every page, offline search, each page titled by its heading, math by the MathJax the site serves
(sphinx-mathjax-offline, no CDN), previous/next, a download button per notebook (its .ipynb) and a launch button
(:data:`LAUNCH_URL`: the notebook in JupyterLab), the landing page the README's opening with its answer and figures,
notebook 08 without its code.

It stages a Sphinx project (the repository's layout: notebooks/, docs/, figures/ and index.md, the README's part)
and runs ``sphinx-build`` on it. Links to a file the book does not hold become their text. A notebook missing from
the executed folder stops the build in one line (exit 2, nothing written): run ``make run`` first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from course.workbooks import HANDOUT_DOCS  # the docs pages: those the student copy carries
from trgrpo.files import ROOT

HIDE_CODE = ("08_",)  # pages read for their results: code cells hidden (myst-nb's remove_code_source)
FINDINGS = "## What we found so far"  # the landing page: the README's opening, then this section
LINK_RE = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s#]+)(#[^)\s]*)?\)")
CONF = """\
project = "trgrpo: Token-Regulated GRPO, reproduced in notebooks"
html_title = "trgrpo course"
extensions = ["myst_nb", "sphinx-mathjax-offline"]  # MathJax copied into _static/mathjax: math renders offline
nb_execution_mode = "off"  # the outputs make run stored
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
html_theme = "sphinx_book_theme"
html_theme_options = {"use_download_button": True, "show_toc_level": 2, "home_page_in_toc": True}
html_sourcelink_suffix = ""  # the download button gives NN_x.ipynb, not NN_x.ipynb.txt
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header", "misc.highlighting_failure"]


def launch_button(app, pagename, templatename, context, doctree):  # the theme's launch group: one link, no fetch
    if pagename.startswith("notebooks/"):
        link = {"type": "link", "text": "JupyterLab", "tooltip": "Open this notebook in make lab's JupyterLab",
                "icon": "_static/images/logo_jupyterhub.svg", "url": f"{launch_url}/{pagename}.ipynb"}
        context["header_buttons"].append({"type": "group", "tooltip": "Launch interactive content",
                                          "icon": "fas fa-rocket", "buttons": [link], "label": "launch-buttons"})


def setup(app):
    app.connect("html-page-context", launch_button, priority=501)  # after the theme's prep_header_buttons (500)
"""
# Where a notebook page's launch button opens it: `make lab`'s JupyterLab (it serves the repository root, at
# JupyterLab's default port). The repository has no public URL, so the theme's own launch buttons (Binder, Colab,
# JupyterHub: all built on its repository_url) cannot be used; docs/design.md, section 5.
LAUNCH_URL = "http://localhost:8888/lab/tree"


def _relink(text: str, here: str, held: set[str]) -> str:
    """Markdown ``text`` of the repository file ``here`` for the book: README.md is the landing page (index.md); a
    link to a file the book does not hold (``held``: repository paths) becomes its text, an image of one goes."""

    def sub(m: re.Match) -> str:
        bang, label, link, anchor = m.group(1), m.group(2), m.group(3), m.group(4) or ""
        if "://" in link or link.startswith("mailto:"):
            return m.group(0)
        target = os.path.normpath(os.path.join(os.path.dirname(here), link))
        if target == "README.md":
            target, anchor = "index.md", ""
        if target not in held:
            return "" if bang else label
        return f"{bang}[{label}]({os.path.relpath(target, os.path.dirname(here) or '.')}{anchor})"

    return LINK_RE.sub(sub, text)


def landing(readme: str, held: set[str]) -> str:
    """index.md: the README up to its "Two commands" (what the course is, the answer's forest plot, the figures, the
    notebooks and their times) and its findings section, relinked; then the book's table of contents."""
    opening = readme.split("\n## Two commands", 1)[0]
    findings = readme.split(FINDINGS, 1)[1].split("\n## ", 1)[0] if FINDINGS in readme else ""
    text = opening + (f"\n\n{FINDINGS}{findings}" if findings else "")
    text = re.sub(r"<!--.*?-->\n?", "", text, flags=re.S)
    pages = [p[: -len(Path(p).suffix)] for p in sorted(held) if p.startswith("notebooks/")]
    pages += [d[:-3] for d in HANDOUT_DOCS]
    toc = "\n".join(["```{toctree}", ":hidden:", ":maxdepth: 1", "", *pages, "```", ""])
    return _relink(text, "README.md", held) + "\n\n" + toc


def stage(executed: Path, names: list[str], src: Path) -> None:
    """The Sphinx project in ``src``: conf.py, index.md, the executed notebooks (relinked, 08 without code),
    the docs pages and the figures."""
    held = {f"notebooks/{n}" for n in names} | set(HANDOUT_DOCS)
    held |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "figures").glob("*.png")}
    (src / "notebooks").mkdir(parents=True)
    for name in names:
        nb = json.loads((executed / name).read_text())
        for c in nb["cells"]:
            if c["cell_type"] == "markdown":
                c["source"] = _relink("".join(c["source"]), f"notebooks/{name}", held)
        if name.startswith(HIDE_CODE):
            nb["metadata"]["mystnb"] = {"remove_code_source": True}
        (src / "notebooks" / name).write_text(json.dumps(nb))
    for doc in HANDOUT_DOCS:
        (src / doc).parent.mkdir(exist_ok=True)
        (src / doc).write_text(_relink((ROOT / doc).read_text(), doc, held))
    shutil.copytree(ROOT / "figures", src / "figures", ignore=shutil.ignore_patterns("*.json", "*.md"))
    (src / "index.md").write_text(landing((ROOT / "README.md").read_text(), held))
    (src / "conf.py").write_text(f"launch_url = {LAUNCH_URL!r}\n{CONF}")


def build(executed: Path, out: Path, names: list[str]) -> int:
    """Write the book into ``out`` (Sphinx's html builder): sphinx-build's exit status."""
    missing = [n for n in names if not (executed / n).is_file()]
    if missing:
        raise FileNotFoundError(f"not in {executed}: {', '.join(missing)} (run `make run` first)")
    from sphinx.cmd.build import build_main

    with tempfile.TemporaryDirectory(prefix="trgrpo-book-") as work:
        stage(executed, names, Path(work) / "src")
        shutil.rmtree(out, ignore_errors=True)
        return build_main(["-b", "html", "-q", "-d", str(Path(work) / "doctrees"), str(Path(work) / "src"), str(out)])

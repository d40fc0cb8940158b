"""
Sphinx configuration of the sb3-reset-ppo documentation.

Build from the repository root with ``make docs``, i.e. ``sphinx-build -W --keep-going -b html docs docs/_build/html``
(warnings are errors; ``tests/docs/test_docs.py`` builds it the same way). Pages are Markdown (MyST). ``docs/design.md`` is
a page as it stands; ``CHANGELOG.md``, parts of ``README.md`` and the study reports and protocols of ``benchmarks/``
are included, not copied.
"""

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # autodoc documents this checkout, installed or not

from sb3_reset_ppo import __version__  # noqa: E402

project = "sb3-reset-ppo"
author = "sb3-reset-ppo contributors"
project_copyright = "sb3-reset-ppo contributors"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}

html_theme = "furo"
html_title = f"sb3-reset-ppo {release}"


# The study reports and protocols of benchmarks/studies/ that have a page under docs/reports/ (each includes its file):
# the included file's path from the repository's root -> the page's name
REPORT_PAGES = {
    str((path.parent / match.group(1)).resolve().relative_to(ROOT)): path.stem
    for path in (Path(__file__).parent / "reports").glob("*.md")
    for match in [re.search(r"```\{include\} (\S+)", path.read_text())]
    if match
}


def link_report_pages(app: Any, relative_path: Path, parent_docname: str, content: list[str]) -> None:
    """
    In README.md's included parts, point links to ``benchmarks/studies/<study>/<page>.md`` at the report's page: on
    GitHub the link opens the file, on the site its page (``:relative-docs: docs/`` then resolves ``docs/reports/...``).
    """
    if Path(relative_path).name != "README.md":
        return

    def page(match: re.Match) -> str:
        name = REPORT_PAGES.get(match.group(1))
        return f"](docs/reports/{name}.md" if name else match.group(0)

    content[0] = re.sub(r"\]\((benchmarks/[\w/]+\.md)", page, content[0])


def setup(app: Any) -> dict[str, Any]:
    app.connect("include-read", link_report_pages)
    return {"parallel_read_safe": True}

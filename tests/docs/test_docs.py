"""The documentation site builds without a warning, and every Python code block of the README and the docs runs."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# What the docs build needs (the `docs` extra); without it the build test is skipped, the snippets still run
DOCS_REQUIREMENTS = ("sphinx", "myst_parser", "furo")
# Blocks that tests/docs/test_readme.py runs with their output checked: (file, heading above the block)
RUN_BY_TEST_README = {
    ("README.md", "## Quick start"),
    ("docs/guide/usage.md", "## GRU policies"),
}
# Small budgets for the snippets: what each substitution replaces must be in the block that needs it
BUDGETS = ((re.compile(r"\.learn\(\s*[\d_]+"), ".learn(1_024"), (re.compile(r"n_eval_episodes=\d+"), "n_eval_episodes=5"))


class CodeBlock(NamedTuple):
    path: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    heading: str  # the last Markdown heading above the block ("" if none)
    code: str
    expected_output: str | None  # a ```text block right after the block: what it prints


def markdown_files() -> list[Path]:
    """The README, every Markdown page of the docs (not the build output) and every file a page includes."""
    pages = sorted(path for path in DOCS.rglob("*.md") if "_build" not in path.relative_to(DOCS).parts)
    included = [
        (page.parent / target).resolve()
        for page in pages
        for target in re.findall(r"^`{3,}\{include\}\s+(\S+)", page.read_text(), re.MULTILINE)
    ]
    files = [ROOT / "README.md", *pages, *included]
    return sorted(set(files), key=files.index)


def python_blocks(path: Path) -> list[CodeBlock]:
    """Every fenced ```python block of a Markdown file, with the ```text block that follows it, if any."""
    lines = path.read_text().splitlines()
    blocks: list[CodeBlock] = []
    heading = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if re.match(r"#{1,6} ", line):
            heading = line
        fence = re.match(r"(`{3,})(\S*)(?:\s.*)?$", line)
        if not fence:
            index += 1
            continue
        ticks, language = fence.groups()
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == ticks)
        if language == "python":
            following = end + 1
            while following < len(lines) and not lines[following].strip():
                following += 1
            expected = None
            if following < len(lines) and lines[following].strip() == "```text":
                text_end = next(i for i in range(following + 1, len(lines)) if lines[i].strip() == "```")
                expected = "\n".join(lines[following + 1 : text_end]) + "\n"
            code = "\n".join(lines[index + 1 : end]) + "\n"
            blocks.append(CodeBlock(str(path.relative_to(ROOT)), index + 1, heading, code, expected))
        index = end + 1
    return blocks


ALL_BLOCKS = [block for path in markdown_files() for block in python_blocks(path)]
GENERIC_BLOCKS = [block for block in ALL_BLOCKS if (block.path, block.heading) not in RUN_BY_TEST_README]


def with_small_budget(code: str) -> str:
    for pattern, replacement in BUDGETS:
        code = pattern.sub(replacement, code)
    return code


def snippet_environment() -> dict[str, str]:
    # One thread per snippet (the machine is shared), the checkout importable, no display for rendering
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "SDL_VIDEODRIVER": "dummy"}


def test_every_python_block_is_run() -> None:
    # The blocks test_readme.py runs exist where it looks for them; every other block runs below
    found = {(block.path, block.heading) for block in ALL_BLOCKS}
    assert found >= RUN_BY_TEST_README, RUN_BY_TEST_README - found
    assert len(GENERIC_BLOCKS) + len(RUN_BY_TEST_README) <= len(ALL_BLOCKS)
    assert GENERIC_BLOCKS, "no Python block outside test_readme.py's: the extractor found nothing"


@pytest.mark.parametrize("block", GENERIC_BLOCKS, ids=[f"{block.path}:{block.line}" for block in GENERIC_BLOCKS])
def test_python_block_runs(block: CodeBlock, tmp_path: Path) -> None:
    code = with_small_budget(block.code)
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=snippet_environment()
    )
    assert result.returncode == 0, f"{block.path}:{block.line} failed:\n{result.stderr[-3000:]}"
    if block.expected_output is not None:
        # The page shows what the block prints: it must be what it prints
        assert result.stdout == block.expected_output, f"{block.path}:{block.line} printed:\n{result.stdout}"


def test_docs_build_without_warnings(tmp_path: Path) -> None:
    missing = [name for name in DOCS_REQUIREMENTS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the docs build needs {', '.join(missing)} (pip install -e '.[docs]')")
    import pickle

    from docutils import nodes

    # The dummy builder reads and resolves every page (cross-references, autodoc, includes, images) as the HTML
    # builder does, and warns alike, but writes no HTML: 40% less CPU. `make docs` builds the HTML site
    doctrees = tmp_path / "doctrees"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "dummy", "-d", str(doctrees), str(DOCS),
         str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=snippet_environment(),
    )  # fmt: skip
    assert result.returncode == 0, f"sphinx-build -W failed:\n{result.stderr[-5000:]}"

    def doctree(page: str) -> nodes.document:
        return pickle.loads((doctrees / f"{page}.doctree").read_bytes())

    # The pages the README links to, the API reference and the included files are there
    for page in ("index", "algorithm", "design", "changelog", "guide/usage", "studies/evidence", "api/reset_ppo"):
        assert (doctrees / f"{page}.doctree").exists(), page
    api = doctree("api/reset_ppo").astext()
    assert "window_coverage" in api and "NonFiniteTrainingError" in api  # autodoc read the docstrings
    # The study pages' figures were found (image paths are relative to the docs' folder)
    images = [node["uri"] for node in doctree("studies/evidence").findall(nodes.image)]
    assert images and all((DOCS / uri).resolve().exists() for uri in images), images
    # The changelog is included, not copied: its first heading is the page's
    first_heading = next(line[2:] for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("# "))
    assert first_heading == doctree("changelog").next_node(nodes.title).astext()


def test_the_install_page_lists_every_extra() -> None:
    # The extras table of docs/guide/install.md against setup.cfg's extras_require, both ways
    import configparser

    setup = configparser.ConfigParser(interpolation=None)
    setup.read(ROOT / "setup.cfg", encoding="utf-8")
    extras = set(setup["options.extras_require"])
    table = re.findall(r"^\| `([\w-]+)` \| ", (DOCS / "guide" / "install.md").read_text(), re.MULTILINE)
    assert len(table) == len(set(table)) and set(table) == extras, sorted(set(table) ^ extras)


def test_no_page_or_message_installs_the_package_from_pypi() -> None:
    # The package is not on PyPI: installs are from a clone (pip install -e ".[extra]"), never by its name
    by_name = re.compile(r"pip install\s+(?:-\S+\s+)*[\"']?" + re.escape("sb3-reset-ppo") + r"\b")
    files = [
        *markdown_files(),
        *(path for folder in ("sb3_reset_ppo", "tests", "examples", "benchmarks") for path in (ROOT / folder).rglob("*.py")),
    ]
    offenders = [str(path.relative_to(ROOT)) for path in files if by_name.search(path.read_text())]
    assert offenders == []
    for page in (ROOT / "README.md", DOCS / "guide" / "install.md"):
        assert "The package is not on PyPI" in page.read_text(), page.name


def test_the_examples_page_lists_every_example_and_every_env() -> None:
    import gymnasium as gym

    import sb3_reset_ppo.envs  # noqa: F401  (registers the package's envs)

    page = (DOCS / "guide" / "examples.md").read_text()
    scripts = sorted(path.name for path in (ROOT / "examples").glob("*.py"))
    assert "onnx_play.py" in scripts and [name for name in scripts if f"`examples/{name}`" not in page] == []
    envs = sorted(env_id for env_id, spec in gym.registry.items() if str(spec.entry_point).startswith("sb3_reset_ppo."))
    assert "MaskedCueRecall-v0" in envs and len(envs) >= 12
    assert [env_id for env_id in envs if f"`{env_id}`" not in page] == []


def _linked_pages() -> list[Path]:
    """The README, CHANGELOG, the docs' pages and every Markdown file of benchmarks/ except the stored runs' own."""
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]
    pages += [p for p in (ROOT / "benchmarks").rglob("*.md") if "results" not in p.relative_to(ROOT / "benchmarks").parts]
    return sorted(pages)


def test_every_link_and_repository_path_in_the_pages_exists() -> None:
    # Relative Markdown links and images resolve from the page's folder; a path written as `benchmarks/...`,
    # `docs/...`, `examples/...` or `sb3_reset_ppo/...` (a file or a folder, as the pages name them) from the
    # repository's root. The CHANGELOG and the protocols keep history: only their links are checked
    missing = []
    for page in _linked_pages():
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)}: link {target}")
        if page.name in ("CHANGELOG.md", "PROTOCOL.md"):  # a protocol stays as it was committed before its runs
            continue
        for target in re.findall(r"`((?:benchmarks|docs|examples|sb3_reset_ppo)/[\w./-]+?)[`\s:]", text):
            if "<" in target or "*" in target or target.startswith(("benchmarks/results/", "docs/_build")):
                continue
            if not (ROOT / target.rstrip(".")).exists():
                missing.append(f"{page.relative_to(ROOT)}: path {target}")
    assert not missing, "\n".join(missing)


def _anchors(page: Path) -> set[str]:
    """The ids a link may name after ``#`` on a Markdown page: its headings' slugs, as GitHub and MyST's
    ``myst_heading_anchors`` make them (code spans and links as their text), and its ``(label)=`` targets."""
    text = re.sub(r"^(`{3,}).*?^\1", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)  # no fenced blocks
    anchors = set(re.findall(r"^\(([\w-]+)\)=", text, re.MULTILINE))
    for title in re.findall(r"^#{1,6} +(.*?)\s*$", text, re.MULTILINE):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title.replace("`", ""))
        anchors.add(re.sub(r"[^\w\- ]", "", title.lower().replace(" ", "-")))  # myst_parser.slugs.github_slugify
    return anchors


def test_every_link_anchor_names_a_heading_of_its_page() -> None:
    # A `page.md#anchor` link whose anchor no heading makes opens the page at its top on GitHub and on the site
    broken = []
    for page in _linked_pages():
        text = re.sub(r"`[^`\n]*`", "", re.sub(r"^(`{3,}).*?^\1", "", page.read_text(), flags=re.MULTILINE | re.DOTALL))
        for target, anchor in re.findall(r"\]\(([^)\s#]*)#([^)\s]+)\)", text):
            linked = (page.parent / target) if target else page
            if linked.suffix == ".md" and linked.exists() and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert not broken, "\n".join(broken)


# A repository path as the CHANGELOG and the pages write it, in code or in prose: a file or a folder of the package,
# its tests, the docs, the examples or the benchmarks project (`tests/...::test_name` names the file)
_REPOSITORY_PATH = re.compile(r"(?<![\w./-])((?:benchmarks|docs|examples|sb3_reset_ppo|tests)/[\w./*-]*[\w/*])")


def _named_path_exists(path: str) -> bool:
    """Whether a path the pages name exists: a file or folder, a stored study's run folder or a file in one."""
    if "*" in path:
        return any(ROOT.glob(path))
    if (ROOT / path).exists() or path.startswith("docs/_build"):
        return True
    parts = path.split("/")
    if parts[:2] == ["benchmarks", "results"] and len(parts) > 2:
        # A study's run folder lives in its tables and is unpacked on demand (benchmarks/kit/rundata.py); a benchmark's
        # --out names the prefix of its .txt and .json
        return (ROOT / "benchmarks" / "results" / f"{parts[2]}.runs.jsonl.gz").exists() or any(
            (ROOT / path).parent.glob((ROOT / path).name + ".*")
        )
    return False


def test_every_path_the_changelog_and_the_pages_name_exists() -> None:
    # The README, the CHANGELOG (its history names where files are now) and the documentation's pages; not the
    # studies' own files, whose protocols stay as committed before their runs and whose results quote the commands run
    missing = []
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]
    for page in sorted(pages):
        for path in _REPOSITORY_PATH.findall(page.read_text()):
            if "<" not in path and not _named_path_exists(path.rstrip(".")):
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "\n".join(missing)


# A docs page as the package, its tests and the benchmarks cite it in docstrings, comments and messages
_CITED_PAGE = re.compile(r"(?<![\w-])(docs/[\w./-]+?\.md)\b")


def test_every_docs_page_the_code_cites_exists() -> None:
    # Stored results quote what was true when they were made, and a protocol stays as committed before its runs
    missing = []
    for folder in ("sb3_reset_ppo", "tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if path.suffix not in (".py", ".md", ".yml", ".yaml", ".toml", ".cfg", ".txt") or "results" in parts:
                continue
            if path.name.startswith("PROTOCOL"):
                continue
            for cited in _CITED_PAGE.findall(path.read_text()):
                if not (ROOT / cited).is_file():
                    missing.append(f"{path.relative_to(ROOT)}: {cited}")
    assert missing == [], "\n".join(missing)

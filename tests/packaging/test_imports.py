"""
The package's imports: no module imports, even inside a function, one that imports it back; neither the package nor
its tests import the benchmarks' project (benchmarks/ depends on the package, never the other way).
"""

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sb3_reset_ppo"


def _module(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports (module-level and in functions)."""
    paths = {_module(path, package): path for path in package.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        base_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                parts = base_package.split(".")[: len(base_package.split(".")) - node.level + 1] if node.level else []
                base = ".".join([*parts, node.module] if node.module else parts)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                # A module's own packages are imported with it: not an edge
                if target and target != name and not name.startswith(f"{target}."):
                    graph[name].add(target)
    return graph


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert "sb3_reset_ppo.common.masking" in graph and len(graph) > 50
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        raise AssertionError(f"import circle: {' -> '.join(error.args[1])}") from None


def test_a_circle_is_found(tmp_path: Path) -> None:
    package = tmp_path / "sb3_reset_ppo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from sb3_reset_ppo import b\n")
    (package / "b.py").write_text("def f():\n    from .a import g\n")
    graph = import_graph(package)
    assert graph["sb3_reset_ppo.a"] == {"sb3_reset_ppo.b"} and graph["sb3_reset_ppo.b"] == {"sb3_reset_ppo.a"}


def imports_of(path: Path) -> set[str]:
    """
    The top-level names of the absolute imports in ``path`` (module-level and in functions), ``benchmarks`` too where
    it loads a file of the benchmarks' project by its path (``importlib.util.spec_from_file_location``).
    """
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and "spec_from_file_location" in ast.unparse(node.func):
            if "benchmarks" in ast.unparse(node):
                names.add("benchmarks")
        elif isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.partition(".")[0])
    return names


def test_neither_the_package_nor_its_tests_import_the_benchmarks() -> None:
    paths = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    assert len(paths) > 100
    importing = [str(path.relative_to(ROOT)) for path in paths if "benchmarks" in imports_of(path)]
    assert importing == [], f"these import the benchmarks' project: {importing}"


def test_an_import_of_the_benchmarks_is_found(tmp_path: Path) -> None:
    loads = 'spec = importlib.util.spec_from_file_location("g", ROOT / "benchmarks" / "kit" / "run_grid.py")\n'
    for source in ("from benchmarks.tests.bench_helpers import ROOT\n", "def f():\n    import benchmarks.kit\n", loads):
        (tmp_path / "t.py").write_text(source)
        assert "benchmarks" in imports_of(tmp_path / "t.py")
    (tmp_path / "t.py").write_text("from .benchmarks import x\nbenchmarks = 1\n")
    assert "benchmarks" not in imports_of(tmp_path / "t.py")

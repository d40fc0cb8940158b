"""The package's imports: no module imports, even inside a function, one that imports it back."""

import ast
import graphlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sb3_reset_ppo"


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

"""The house's rules for its own code: no module of src/ imports itself back
through others (an import circle makes the order of imports matter, and one module of the two
cannot be understood, changed or tested without the other)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import PACKAGE, PROJECT_ROOT

ROOTS = {PACKAGE: PROJECT_ROOT / "src" / PACKAGE}


def module_files() -> dict[str, Path]:
    """Dotted module name -> its file, for every module under ROOTS (packages by __init__)."""
    found = {}
    for top, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = [top, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:` (imports for the type checker only)."""
    kept: list[ast.AST] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
            continue
        kept.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return kept


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules under ROOTS that `name` imports, at its top or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *filter(None, [node.module])])
            for alias in node.names:  # `from pkg import module` imports the module
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
    return {imported for imported in found if imported in modules and imported != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back() -> None:
    modules = module_files()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert len(graph) > 40 and sum(map(len, graph.values())) > 60  # the graph was read
    assert cycles(graph) == []


def test_an_import_circle_is_found(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "one.py").write_text("from . import two\n")
    (package / "two.py").write_text("def f():\n    from .one import x\n")
    (package / "three.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .one import x\n"
    )
    modules = {"pkg": package / "__init__.py", "pkg.one": package / "one.py",
               "pkg.two": package / "two.py", "pkg.three": package / "three.py"}  # fmt: skip
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert graph["pkg.three"] == set()  # for the type checker only
    assert cycles(graph) == [["pkg.one", "pkg.two"]]

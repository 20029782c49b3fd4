"""What the package promises as a whole: on the user's machine it imports only the standard
library and PyYAML, and its tasks invoke (beside any project); what runs in a project's images
(serving/, live_metrics/, cluster/) imports only what its extra names and the image's lock holds;
no module imports itself back through others, at run time; and it acts on the project its tasks
name, or the one it is run in."""

from __future__ import annotations

import ast
import graphlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cloudgpu

SOURCE = Path(cloudgpu.__file__).resolve().parent
# botocore: read by the maintainers' refresh of sagemaker_instances.json (never on a plan's path).
ALLOWED = set(sys.stdlib_module_names) | {"yaml", "cloudgpu", "botocore"}
TASKS_ALLOWED = ALLOWED | {"invoke"}  # cloudgpu.tasks: what a project's tasks.py declares
TESTING_ALLOWED = ALLOWED | {"pytest"}  # cloudgpu.testing: imported by tests only
# What runs in a project's images: their locks hold these (pyproject.toml's extras serve, train);
# the clouds' SDKs only where the job runs on that cloud (imported in the function that needs it).
IN_IMAGE = {
    "cloudgpu.serving": ALLOWED | {"numpy", "prometheus_client", "uvicorn"},
    "cloudgpu.live_metrics": ALLOWED | {"prometheus_client", "pynvml"},
    "cloudgpu.cluster": ALLOWED | {"google", "azure", "requests"},
    "cloudgpu.in_image": ALLOWED | {"invoke"},  # invoke build's Exit, imported there only
}


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package."""
    found = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = ["cloudgpu", *path.relative_to(SOURCE).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path) -> set[str]:
    """The absolute names of what module `name` imports (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for node in run_time_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *filter(None, [node.module])])
            names |= {f"{base}.{alias.name}" for alias in node.names} | {base}
    return names


def run_time_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree` but those under `if TYPE_CHECKING:`, which only a type checker
    reads (an import there is none at run time)."""
    found, waiting = [], [tree]
    while waiting:
        node = waiting.pop()
        found.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            waiting.extend(node.orelse)
            continue
        waiting.extend(ast.iter_child_nodes(node))
    return found


def allowed(name: str) -> set[str]:
    """The top-level modules that module `name` may import."""
    for package, names in IN_IMAGE.items():
        if name == package or name.startswith(f"{package}."):
            return names
    if name.startswith("cloudgpu.testing"):
        return TESTING_ALLOWED
    return TASKS_ALLOWED if name.startswith("cloudgpu.tasks") else ALLOWED


def test_the_package_imports_the_standard_library_and_pyyaml_only() -> None:
    found = {name: imported(name, path) for name, path in modules().items()}
    assert len(found) > 50, "the package's modules were read"
    foreign = {
        f"{name}: {target}"
        for name, targets in found.items()
        for target in targets
        if target.split(".")[0] not in allowed(name)
    }
    assert foreign == set()


def test_no_module_imports_itself_back() -> None:
    known = modules()
    graph = {
        name: {target for target in imported(name, path) if target in known and target != name}
        for name, path in known.items()
        if path.name != "__init__.py"  # a package's __init__ gathers its modules: not a circle
    }
    assert sum(map(len, graph.values())) > 60, "the imports were read"
    graphlib.TopologicalSorter(graph).prepare()  # CycleError names the circle


def test_a_circle_is_a_cycle_error() -> None:
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter({"a": {"b"}, "b": {"a"}}).prepare()


def test_an_import_for_the_type_checker_only_is_no_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    lines = ["from typing import TYPE_CHECKING", "import json", "if TYPE_CHECKING:",
             "    from .server import Server", "else:", "    import csv"]  # fmt: skip
    module.write_text("\n".join(lines) + "\n")
    assert imported("cloudgpu.serving.m", module) == {
        "typing",
        "typing.TYPE_CHECKING",
        "json",
        "csv",
    }


ROOT_OF = "import cloudgpu.project as p; print(p.ROOT)"


def root_seen(cwd: Path, **env: str) -> Path:
    environment = {k: v for k, v in os.environ.items() if k != "CLOUDGPU_PROJECT"}
    environment |= {"PYTHONPATH": str(SOURCE.parent), **env}
    done = subprocess.run(
        [sys.executable, "-c", ROOT_OF], cwd=cwd, env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


def test_the_project_is_the_one_named_else_the_nearest_with_a_cloud_toml(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "src" / "deep").mkdir(parents=True)
    (project / "cloud.toml").write_text("")
    assert root_seen(project / "src" / "deep") == project.resolve()
    other = tmp_path / "other"
    other.mkdir()
    assert root_seen(other) == other.resolve(), "no cloud.toml up the tree: here"
    assert root_seen(other, CLOUDGPU_PROJECT=str(project)) == project.resolve()

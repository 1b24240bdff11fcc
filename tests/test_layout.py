"""The folders follow the data, and each imports only from the folders below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"summarize", "api", "jobs", "worker", "readers", "core", "migrations"}
MAY_IMPORT = {
    "summarize": {"summarize", "api", "jobs", "worker", "readers", "core"},
    "api": {"api", "jobs", "readers", "core"},
    "jobs": {"jobs", "core"},
    "worker": {"worker", "core"},
    "readers": {"readers", "core"},
    "core": {"core"},
    "migrations": {"migrations", "core"},
}


def imported(path: Path, inside_functions: bool = True) -> set[str]:
    """The top-level packages a file imports: at its top and, unless told not to, inside its
    functions (what importing it alone imports)."""
    found, todo = set(), list(ast.parse(path.read_text(), str(path)).body)
    while todo:
        node = todo.pop()
        if not inside_functions and isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        ):
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        todo.extend(ast.iter_child_nodes(node))
    return found


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_a_folder_imports_only_the_folders_below_it(folder):
    reaching_up = {
        str(path.relative_to(ROOT)): sorted(imported(path) & OURS - MAY_IMPORT[folder])
        for path in sorted((ROOT / folder).rglob("*.py"))
    }
    assert {path: up for path, up in reaching_up.items() if up} == {}


def test_nothing_outside_the_worker_imports_vllm_or_torch_when_imported():
    """`summarize submit` starts in about a second; `model fetch` imports torch when it runs."""
    importers = [
        str(path.relative_to(ROOT))
        for folder in sorted(MAY_IMPORT.keys() - {"worker"})
        for path in sorted((ROOT / folder).rglob("*.py"))
        if {"vllm", "torch"} & imported(path, inside_functions=False)
    ]
    assert importers == []


LONGEST_MODULE_LINES = 400  # a module read in one sitting; past it, it asks to be split


def test_no_module_is_longer_than_one_sitting():
    folders = [*sorted(MAY_IMPORT.keys() - {"migrations"}), "scripts"]
    longer = {
        str(path.relative_to(ROOT)): lines
        for folder in folders
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > LONGEST_MODULE_LINES
    }
    assert longer == {}


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_at_top(path: Path, modules: set[str]) -> set[str]:
    """The modules of ours a file imports when it is imported (not inside its functions)."""
    found = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found |= {name for name in names if name in modules}
    return found


def test_no_module_imports_itself_round_a_circle():
    paths = [p for folder in sorted(OURS) for p in sorted((ROOT / folder).rglob("*.py"))]
    modules = {_module_of(p) for p in paths}
    graph = {_module_of(p): _imports_at_top(p, modules) - {_module_of(p)} for p in paths}
    circles, done, path = [], set(), []

    def visit(module: str) -> None:
        if module in path:
            circles.append(path[path.index(module) :] + [module])
            return
        if module in done:
            return
        path.append(module)
        for other in sorted(graph.get(module, ())):
            visit(other)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    assert circles == []

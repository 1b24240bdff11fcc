"""The folders follow the data, and each imports only from the folders below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"summarize", "jobs", "worker", "readers", "core", "migrations"}
MAY_IMPORT = {
    "summarize": {"summarize", "jobs", "worker", "readers", "core"},
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

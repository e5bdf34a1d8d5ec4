"""The three packages stay honest: protocol depends on nothing of ours, tui and worker never
import each other."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(folder: Path) -> set[tuple[str, str]]:
    found = set()
    for file in folder.rglob("*.py"):
        tree = ast.parse(file.read_text(), filename=str(file))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {(str(file), a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add((str(file), node.module))
            elif isinstance(node, ast.ImportFrom) and node.level >= 2:
                found.add((str(file), "..relative-escape"))
    return found


@pytest.mark.parametrize("folder, forbidden", [("tui", "grpo_tui.worker"), ("worker", "grpo_tui.tui")])
def test_tui_and_worker_never_import_each_other(folder, forbidden):
    bad = [(f, mod) for f, mod in imported_modules(ROOT / folder) if mod.startswith(forbidden)]
    bad += [(f, mod) for f, mod in imported_modules(ROOT / folder) if mod == "..relative-escape"]
    assert not bad


def test_protocol_depends_on_msgspec_and_stdlib_only():
    allowed_third_party = {"msgspec"}
    for file, mod in imported_modules(ROOT / "protocol"):
        top = mod.split(".")[0]
        if top == "__future__":
            continue
        if top == "grpo_tui":
            assert mod.startswith("grpo_tui.protocol"), (file, mod)
            continue
        assert top in sys.stdlib_module_names or top in allowed_third_party, (file, mod)


def test_dashboard_never_imports_mlx():
    for file, mod in imported_modules(ROOT / "tui"):
        assert not mod.startswith("mlx"), (file, mod)


def test_no_module_is_too_long():
    for folder in ("protocol", "worker", "tui"):
        for file in (ROOT / folder).rglob("*.py"):
            assert len(file.read_text().splitlines()) <= 450, file


def test_installed_under_one_namespace():
    out = subprocess.run(
        [sys.executable, "-c", "import grpo_tui.protocol, grpo_tui.worker, grpo_tui.tui; print('ok')"],
        capture_output=True, text=True, cwd="/",
    )
    assert out.stdout.strip() == "ok", out.stderr

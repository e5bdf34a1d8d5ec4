"""``grpo-tui init TEMPLATE [DIR]``: a starter run to edit: a config, a rewards file, a few example
rows (or generated tasks) and the bundled tiny model, so ``grpo-tui run DIR/config.toml`` trains at once, offline.

The templates live in ``tui/templates/<name>/`` (package data); the tiny models are the examples'
(``templates/models/`` links to ``examples/models/``; a wheel holds copies).
"""

from __future__ import annotations

import shutil
from pathlib import Path

TEMPLATES = {
    "math": ("tiny-arith", "GSM8K-style word problems, the answer after ####"),
    "json": ("tiny-arith", "JSON answers checked against a JSON schema"),
    "tools": ("tiny-agent", "agent training with one tool (a calculator)"),
    "reasoning-gym": ("tiny-arith", "reasoning-gym tasks generated offline, scored by their own scorers"),
}
ROOT = Path(__file__).resolve().parent / "templates"


class InitError(Exception):
    """A fixable mistake in the ``init`` arguments: one sentence."""


def describe() -> str:
    return "; ".join(f"{name}: {what}" for name, (_, what) in TEMPLATES.items())


def write_template(name: str, directory: str | None = None) -> Path:
    """Write template ``name`` into ``directory`` (default: ``./<name>``); returns the folder."""
    if name not in TEMPLATES:
        raise InitError(f"no template {name!r}: choose one of {', '.join(TEMPLATES)}")
    dest = Path(directory if directory is not None else name).expanduser()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InitError(f"{dest} already exists and is not empty: give a new folder (`grpo-tui init {name} DIR`)")
    model, _ = TEMPLATES[name]
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / name, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree((ROOT / "models" / model).resolve(), dest / "model")
    return dest

"""The environment that makes a worker process a test starts build a fake trainer instead of the
engine's (``trainer_hook/sitecustomize.py``): no hook in the product's code."""

from __future__ import annotations

import os
from pathlib import Path

HOOK = Path(__file__).with_name("trainer_hook")


def fake_trainer_env(spec: str) -> dict[str, str]:
    """Variables for a worker built with the fake ``spec`` (``file.py:Class``)."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": f"{HOOK}{os.pathsep}{path}" if path else str(HOOK), "GRPO_TUI_TEST_TRAINER": spec}

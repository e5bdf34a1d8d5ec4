"""Swaps a test's fake trainer into a worker process the test starts, from outside the product.

Python imports ``sitecustomize`` at start from ``PYTHONPATH``; ``tests.helpers.fake_trainer_env``
puts this folder there and names the fake in ``GRPO_TUI_TEST_TRAINER=file.py:Class``. The worker
then builds that class where it would build the engine's trainer (``mlx_thread.engine_trainer``),
still on its MLX thread: the fake's module loads only then. ``GRPO_TUI_TEST_HIDE=a,b`` makes the
modules ``a`` and ``b`` look not installed in that process (tests/test_printed_commands.py).
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _install(spec: str) -> None:
    from grpo_tui.worker import mlx_thread

    file, name = spec.rsplit(":", 1)

    def make(config, log):  # type: ignore[no-untyped-def]
        module_spec = importlib.util.spec_from_file_location("grpo_tui_test_trainer", file)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return getattr(module, name)(config, log)

    mlx_thread.engine_trainer = make  # before grpo_tui.worker.main imports it


if os.environ.get("GRPO_TUI_TEST_TRAINER"):
    _install(os.environ["GRPO_TUI_TEST_TRAINER"])


for _hidden in filter(None, os.environ.get("GRPO_TUI_TEST_HIDE", "").split(",")):
    sys.modules[_hidden] = None  # type: ignore[assignment]  # find_spec says None, import raises ImportError

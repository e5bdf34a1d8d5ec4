"""The headless MLX trainer process. Imports ``grpo_tui.protocol``, never ``grpo_tui.tui``.

The process side (this folder) imports no MLX; the engine (``engine/``) is imported on the MLX
thread when the trainer is built (docs/architecture.md, "Processes").
"""

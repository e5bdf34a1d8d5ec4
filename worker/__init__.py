"""The headless MLX trainer process. Imports ``grpo_tui.protocol``, never ``grpo_tui.tui``."""

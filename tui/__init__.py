"""The Textual dashboard. Imports ``grpo_tui.protocol``, never ``grpo_tui.worker``."""

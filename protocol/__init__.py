"""The contract between the dashboard and the worker: messages, codec, the control socket, config
schema, store schema, on-disk layout and exit codes. The helpers both sides share live in
``grpo_tui.common``.

Depends on msgspec and the standard library only.
"""

__version__ = "0.1.0"

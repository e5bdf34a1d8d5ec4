"""TOML output for a resolved config (``grpo-tui check``, the Config tab): msgspec's TOML encoder
(tomli-w underneath), after leaving out ``None`` values, which TOML cannot spell."""

from __future__ import annotations

from typing import Any

import msgspec


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_none(v) for v in value if v is not None]
    return value


def dumps(data: dict[str, Any]) -> str:
    """``data`` as a TOML document: scalars first, then ``[tables]`` and ``[[arrays of tables]]``."""
    return msgspec.toml.encode(_without_none(data)).decode()

"""A small TOML writer for printing a resolved config (``grpo-tui check``)."""

from __future__ import annotations

import json
import re
from typing import Any


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):  # TOML, unlike JSON, also forbids a raw DEL
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items() if x is not None) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _key(k: str) -> str:
    """Bare when TOML allows it, else quoted (``params`` keys are the user's: "a b", "x.y")."""
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _value(k)


def _is_table(v: Any) -> bool:
    return isinstance(v, dict) and any(isinstance(x, (dict, list)) or x is not None for x in v.values())


def dumps(data: dict[str, Any]) -> str:
    """Scalars first, then ``[tables]`` and ``[[arrays of tables]]``; ``None`` values are left out."""
    lines: list[str] = []
    _emit(data, "", lines)
    return "\n".join(lines).strip() + "\n"


def _emit(table: dict[str, Any], prefix: str, lines: list[str]) -> None:
    nested: list[tuple[str, Any]] = []
    for key, v in table.items():
        if v is None:
            continue
        if isinstance(v, dict) and v and key != "params":
            nested.append((key, v))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            nested.append((key, v))
        else:
            lines.append(f"{key} = {_value(v)}")
    for key, v in nested:
        name = f"{prefix}{key}"
        if isinstance(v, list):
            for item in v:
                lines += ["", f"[[{name}]]"]
                _emit(item, f"{name}.", lines)
        else:
            lines += ["", f"[{name}]"]
            _emit(v, f"{name}.", lines)

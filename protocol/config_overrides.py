"""``--set key=value``: one setting over the config file, for ``grpo-tui run|worker|check`` and
``GRPOConfig.from_toml(..., overrides=)``.

The key is a dotted path (``training.learning_rate``, ``rewards[0].weight`` or ``rewards.0.weight``)
and the value is read as TOML (``1e-5``, ``true``, ``"text"``, ``[1, 2]``, ``{rank = 8}``); a value
that is not TOML is taken as a string, so ``--set model.path=Qwen/Qwen3-0.6B`` works unquoted.
Whether the key exists and the value fits is then checked like the file's own keys, so errors name
the key (``grpo.beta: 'x' is not a number``).
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from grpo_tui.protocol.config_errors import ConfigError

_SEGMENT = re.compile(r"([A-Za-z0-9_-]+)|\[(\d+)\]")


def parse_key(key: str, item: str, file: str) -> list[str | int]:
    """``"rewards[0].weight"`` -> ``["rewards", 0, "weight"]``."""
    segments: list[str | int] = []
    for part in key.split("."):
        found = list(_SEGMENT.finditer(part))
        if not part or "".join(m.group(0) for m in found) != part or found[0].group(1) is None:
            raise ConfigError(key or "--set", f"--set {item!r}: {key!r} is not a key path like training.learning_rate", file)
        for m in found:
            name, index = m.group(1), m.group(2)
            segments.append(int(name) if name is not None and name.isdigit() and segments else
                            name if name is not None else int(index))
    return segments


def parse_value(text: str) -> Any:
    """The value as TOML, else the text itself (a bare string)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text.strip()


def apply_override(raw: dict[str, Any], item: str, file: str = "<config>") -> None:
    """Set one ``key=value`` in the parsed TOML ``raw``, creating tables on the way."""
    key, eq, text = item.partition("=")
    key = key.strip()
    if not eq:
        raise ConfigError(key or "--set", f"--set {item!r} has no '=': give key=value, e.g. training.learning_rate=1e-5", file)
    segments = parse_key(key, item, file)
    node: Any = raw
    for seg, nxt in zip(segments, segments[1:] + [None]):
        fresh: Any = parse_value(text) if nxt is None else [] if isinstance(nxt, int) else {}
        if isinstance(seg, int) and isinstance(node, list):
            if seg > len(node):
                raise ConfigError(key, f"--set: index {seg} is past the end (there are {len(node)}; "
                                  f"{len(node)} adds one)", file)
            if seg == len(node):
                node.append(fresh)
            elif nxt is None:
                node[seg] = fresh
        elif isinstance(seg, str) and isinstance(node, dict):
            if nxt is None or seg not in node:
                node[seg] = fresh
        else:
            what = "an array" if isinstance(node, list) else "a table" if isinstance(node, dict) else "a value"
            raise ConfigError(key, f"--set: {seg!r} cannot index {what} here", file)
        node = node[seg]

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


# What one value may be: a setting is a number, a word, a short list or table, never a document.
MAX_VALUE_CHARS = 10_000
MAX_DIGITS = 50
MAX_NESTING = 16


def value_problem(text: str) -> str | None:
    """Why ``text`` is past what a setting's value may be (a line break, its length, a number's digits,
    its nesting), or None. Checked before the value is read, so no reader is asked to parse it."""
    if "\n" in text or "\r" in text:
        return "the value holds a line break; a value is one line (write a list or a string on one line)"
    if len(text) > MAX_VALUE_CHARS:
        return f"the value is {len(text):,} characters; a setting's value is at most {MAX_VALUE_CHARS:,}"
    if (digits := max((len(run) for run in re.findall(r"[0-9]+", text)), default=0)) > MAX_DIGITS:
        return f"the value holds a number of {digits:,} digits; a setting's number has at most {MAX_DIGITS}"
    depth = deepest = 0
    for char in text:
        depth += char in "[{"
        depth -= char in "]}"
        deepest = max(deepest, depth)
    if deepest > MAX_NESTING:
        return f"the value nests {deepest} lists or tables deep; a setting's value nests at most {MAX_NESTING}"
    return None


def parse_value(text: str) -> Any:
    """The value as TOML, else the text itself (a bare string)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return text.strip()


def apply_override(raw: dict[str, Any], item: str, file: str = "<config>") -> None:
    """Set one ``key=value`` in the parsed TOML ``raw``, creating tables on the way."""
    key, eq, text = item.partition("=")
    key = key.strip()
    if not eq:
        raise ConfigError(key or "--set", f"--set {item!r} has no '=': give key=value, e.g. training.learning_rate=1e-5", file)
    segments = parse_key(key, item, file)
    if (problem := value_problem(text)) is not None:
        raise ConfigError(key, f"--set {key}: {problem}", file)
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

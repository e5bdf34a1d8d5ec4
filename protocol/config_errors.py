"""Config errors that name the key: ``ConfigError``, and msgspec's validation messages turned into
a key path and a sentence (``grpo.loss_type: 'dpo' is not one of grpo, bnpo, dr_grpo, dapo``)."""

from __future__ import annotations

import json
import math
import re
import types
import typing
from typing import Any, Literal

import msgspec

from grpo_tui.protocol.config_base import SEP, attribute
from grpo_tui.protocol.outcome import Mistake, MistakeKind


class ConfigError(Mistake, ValueError):
    """A config problem, a fixable mistake (``protocol/outcome.py``). ``key`` is the dotted key path
    (``""`` for file-level errors); ``kind`` says what to fix when it is not the config itself
    (``training.memory_limit_gb`` is a memory budget, ``checkpoint.resume`` names a checkpoint)."""

    def __init__(self, key: str, message: str, file: str | None = None, *, kind: MistakeKind = "config") -> None:
        self.key = key
        self.detail = message
        self.file = file
        text = f"{key}: {message}" if key else message
        super().__init__(kind, f"{file}: {text}" if file else text)


def check_finite(value: Any, segments: list[str | int], file: str) -> None:
    """TOML allows nan and inf; no setting means anything with them (``params`` is the user's)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(_dotted(segments), f"{value!r} is not a finite number", file)
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            if name != "params":
                check_finite(getattr(value, name), segments + [name], file)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_finite(item, segments + [i], file)


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "object": "a table",
    "array": "an array",
}


def explain(error: str, raw: dict[str, Any], root: type) -> tuple[str, str]:
    """Turn a msgspec validation message into (key path, human message)."""
    message, _, where = error.rpartition(" - at `")
    if not _:
        message, where = error, "$`"
    parts = re.findall(r"\.(\w+)|\[(\d+)\]", where.rstrip("`"))
    segments: list[str | int] = [name if name else int(idx) for name, idx in parts]

    if SEP in message:  # raised by a __post_init__
        field, text = message.split(SEP, 1)
        return _dotted(segments + [field]), text
    if m := re.match(r"Object contains unknown field `(.*)`$", message, re.S):
        known = _known_fields(segments, root)
        hint = f" (expected one of: {', '.join(known)})" if known else ""
        return _dotted(segments + [m.group(1)]), f"unknown key{hint}"
    if m := re.match(r"Object missing required field `(\w+)`", message):
        return _dotted(segments + [m.group(1)]), "is required"
    value = _lookup(raw, segments)
    if message.startswith("Invalid enum value"):
        options = _literal_options(segments, root)
        return _dotted(segments), f"{value!r} is not one of {', '.join(options)}"
    if m := re.match(r"Expected `(.+?)`, got `(\w+)`", message):
        expected = " or ".join(_TYPE_WORDS.get(t.strip(), t.strip()) for t in m.group(1).split("|"))
        if segments[-1:] == ["resume"]:
            expected = '"latest", a checkpoint path or false'
        return _dotted(segments), f"{value!r} is not {expected}"
    return _dotted(segments), message


def _dotted(segments: list[str | int]) -> str:
    out = ""
    for seg in segments:
        if isinstance(seg, str) and not re.fullmatch(r"[A-Za-z0-9_-]+", seg):
            seg = json.dumps(seg, ensure_ascii=False)  # quoted like a TOML key: "a.b", ""
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else seg)
    return out


def _lookup(raw: Any, segments: list[str | int]) -> Any:
    for seg in segments:
        try:
            raw = raw[seg]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def _struct_at(segments: list[str | int], root: type) -> Any:
    """The type declared at a key path (unwrapping list[...] and X | None)."""
    tp: Any = root
    for seg in segments:
        tp = _unwrap(tp)
        if isinstance(seg, int):
            tp = typing.get_args(tp)[0] if typing.get_args(tp) else tp
            continue
        hints = typing.get_type_hints(tp) if isinstance(tp, type) else {}
        seg = attribute(tp, seg)
        tp = hints.get(seg)
        if tp is None:
            return None
    return _unwrap(tp)


def _unwrap(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return tp


def _known_fields(segments: list[str | int], root: type) -> list[str]:
    tp = _struct_at(segments, root)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return list(tp.__struct_fields__)
    return []


def _literal_options(segments: list[str | int], root: type) -> list[str]:
    tp = _struct_at(segments, root)
    return [str(a) for a in typing.get_args(tp)] if typing.get_origin(tp) is Literal else []

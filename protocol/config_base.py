"""The base of every config section and the error helper that names the key (shared by
``config`` and ``config_eval``)."""

from __future__ import annotations

from typing import Any

import msgspec

SEP = "\x1f"  # separates "field" from "message" in errors raised by __post_init__


def invalid(field: str, value: Any, expected: str) -> ValueError:
    """The error a section's ``__post_init__`` raises; ``config`` turns it into ``section.field: …``."""
    return ValueError(f"{field}{SEP}{value!r} {expected}")


class Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


def attribute(struct: type, key: str) -> str:
    """The attribute of ``struct`` that the TOML key ``key`` names: itself, or the field renamed
    where TOML's name is a Python keyword (``[async]`` is ``async_``, ``class`` is ``class_``)."""
    if isinstance(struct, type) and issubclass(struct, msgspec.Struct):
        return next((f.name for f in msgspec.structs.fields(struct) if f.encode_name == key), key)
    return key

"""A tool function's JSON schema from its signature and docstring, as
``transformers.utils.get_json_schema`` derives it (TRL passes that schema to the chat template).

Written here because transformers is not a dependency: type hints give the JSON types, a
Google-style docstring gives the description (the text before ``Args:``) and each parameter's
description (its ``name: text`` or ``name (type): text`` line under ``Args:``, continuation lines
indented). A parameter without a type hint is an error, as in transformers: the model would not
know what to pass.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from typing import Any, Callable, Literal

from grpo_tui.common import preflight

_BASIC: dict[Any, str] = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?):\s*$")


class SchemaError(ValueError):
    """A function whose schema cannot be derived; the message names the parameter."""


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of one type hint."""
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint in _BASIC:
        return {"type": _BASIC[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [type_schema(a) for a in args]
        kinds = [p.get("type") for p in parts]
        if all(isinstance(k, str) for k in kinds) and all(len(p) == 1 for p in parts):
            return {"type": list(dict.fromkeys(kinds))}  # int | None -> ["integer", "null"]
        return {"anyOf": parts}
    if origin is Literal:
        return {"type": _BASIC.get(type(args[0]), "string"), "enum": list(args)}
    if hint in (list, tuple, set) or origin in (list, tuple, set):
        out: dict[str, Any] = {"type": "array"}
        if origin in (list, set) and args:
            out["items"] = type_schema(args[0])
        elif origin is tuple and args and args[-1] is not Ellipsis:
            out["prefixItems"] = [type_schema(a) for a in args]
        elif origin is tuple and args:
            out["items"] = type_schema(args[0])
        return out
    if hint is dict or origin is dict:
        out = {"type": "object"}
        if len(args) == 2:
            out["additionalProperties"] = type_schema(args[1])
        return out
    raise SchemaError(f"type {hint!r} has no JSON schema")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) of a Google-style docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    section, current = None, None
    for line in lines:
        if m := _SECTION.match(line):
            section, current = m.group(1), None
            continue
        if section is None:
            description.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line.strip():
            m = re.match(r"^\s{0,8}(\*{0,2}\w+)\s*(?:\(.*?\))?\s*:\s*(.*)$", line)
            if m and (current is None or len(line) - len(line.lstrip()) <= _indent(lines, section)):
                current = m.group(1).lstrip("*")
                params[current] = m.group(2).strip()
            elif current is not None:  # a continuation line
                params[current] = (params[current] + " " + line.strip()).strip()
    return " ".join(" ".join(description).split()), params


def _indent(lines: list[str], section: str) -> int:
    """The indentation of the first entry under ``section`` (entries deeper than it continue one)."""
    inside = False
    for line in lines:
        if _SECTION.match(line):
            inside = line.strip().rstrip(":") == section
            continue
        if inside and line.strip():
            return len(line) - len(line.lstrip())
    return 0


def function_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """``{"type": "function", "function": {"name", "description", "parameters"}}`` for ``fn``."""
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # noqa: BLE001 — an unresolvable annotation: say which function
        raise SchemaError(f"cannot read the type hints of {name}: {exc}") from None
    description, docs = parse_docstring(inspect.getdoc(fn))
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name not in hints:
            raise SchemaError(preflight.no_type_hint(param.name, name))
        try:
            prop = type_schema(hints[param.name])
        except SchemaError as exc:
            raise SchemaError(f"parameter {param.name!r} of {name}: {exc}") from None
        if param.name in docs:
            prop["description"] = docs[param.name]
        properties[param.name] = prop
        if param.default is param.empty:
            required.append(param.name)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}

"""The ``json_schema`` reward's validation on ``jsonschema``, the reference validator.

The draft is the one the schema's ``$schema`` names (Draft 3, 4, 6, 7, 2019-09, 2020-12), else the
newest. A schema that is itself invalid is a config error at start, naming the reward's key.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from grpo_tui.protocol.config import ConfigError

MAX_ERRORS = 3  # per completion: the first few say what is wrong; all of them would flood a sample


def compile_schema(schema: Any, key: str) -> jsonschema.protocols.Validator:
    """A validator for ``schema``; ``ConfigError(key)`` when the schema is not a valid schema."""
    if not isinstance(schema, (dict, bool)):
        raise ConfigError(key, f"must be a JSON Schema (a table), not {type(schema).__name__}")
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise ConfigError(key, f"is not a valid {cls.__name__.removesuffix('Validator')} schema"
                          f"{f' at {where}' if where else ''}: {exc.message}") from None
    # format checks ("email", "date"…) are assertions, as a user writing them expects
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def errors(validator: jsonschema.protocols.Validator, value: Any) -> list[str]:
    """Why ``value`` does not match, as ``"$.path: message"`` lines (empty when it matches)."""
    found = sorted(validator.iter_errors(value), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{e.json_path}: {e.message}" for e in found[:MAX_ERRORS]] + (
        [f"… {len(found) - MAX_ERRORS} more"] if len(found) > MAX_ERRORS else []
    )

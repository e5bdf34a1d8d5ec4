"""A tool function's JSON schema: ``transformers.utils.get_json_schema``'s, the very schema TRL
hands to the chat template (transformers comes with mlx-lm). Its two refusals become one sentence
that names the parameter and says what to write."""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable

from grpo_tui.common import preflight


class SchemaError(ValueError):
    """A function whose schema cannot be derived; the message names the parameter."""


def function_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """``{"type": "function", "function": {"name", "description", "parameters"[, "return"]}}``."""
    from transformers.utils import chat_template_utils as templates  # with the tokenizer's, ~0.6 s

    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        return templates.get_json_schema(fn)
    except templates.TypeHintParsingException as exc:
        if found := re.search(r"Argument (\w+) is missing a type hint", str(exc)):
            raise SchemaError(preflight.no_type_hint(found.group(1), name)) from None
        raise SchemaError(f"{name}: {exc}") from None
    except templates.DocstringParsingException as exc:
        if found := re.search(r"no description for the argument '(\w+)'", str(exc)):
            raise SchemaError(preflight.undescribed_parameter(found.group(1), name)) from None
        if not (inspect.getdoc(fn) or "").strip():
            raise SchemaError(f"{name} has no docstring; add one that says what it does, with each parameter under "
                              "'Args:' (it is the tool's description the model reads)") from None
        raise SchemaError(f"{name}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - e.g. an annotation that names nothing: say which function
        raise SchemaError(f"cannot read the type hints of {name}: {exc}") from None

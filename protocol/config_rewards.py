"""The reward and tool sections: ``[[rewards]]`` (built-ins, imported functions, judge models) and ``[[tools]]`` (docs/config.md)."""

from __future__ import annotations

import re
from typing import Any, Literal

from grpo_tui.protocol.config_base import Section as _Section, invalid as _invalid


BUILTIN_REWARDS = ("accuracy", "xml_format", "length", "tool_use", "json_schema", "soft_overlong", "reasoning_gym")


# The params each built-in takes (its keyword parameters that no column or extra fills; a test holds
# them to the functions' signatures): any other would be silently ignored.
BUILTIN_REWARD_PARAMS: dict[str, tuple[str, ...]] = {
    "accuracy": (), "xml_format": ("tags",), "length": ("target", "max_completion_length", "min_length", "max_length", "unit"),
    "tool_use": ("required", "allowed_tools"),
    "json_schema": ("schema", "tag"), "soft_overlong": ("max_completion_length", "soft_punish_cache"),
    "reasoning_gym": (),
}


def _check_length(params: dict[str, Any]) -> None:
    """``length``: a ``target`` in tokens, or a band (``min_length``/``max_length``, mlx-node's
    ``Length``) counted in ``unit`` = tokens or chars."""
    band = {k: params[k] for k in ("min_length", "max_length") if k in params}
    for key, value in band.items():
        if not _whole(value) or value < 1:
            raise _invalid("params", value, f"— length's {key} must be a whole number >= 1")
    if len(band) == 2 and band["min_length"] > band["max_length"]:
        raise _invalid("params", band["min_length"], f"— length's min_length must not exceed max_length ({band['max_length']})")
    if band and "target" in params:
        raise _invalid("params", params["target"], "— give length either a target or a band (min_length/max_length), not both")
    if "unit" in params and params["unit"] not in ("tokens", "chars"):
        raise _invalid("params", params["unit"], "— length's unit is \"tokens\" or \"chars\"")
    if params.get("unit") == "chars" and not band:
        raise _invalid("params", "chars", "— unit = \"chars\" counts a band: set min_length and/or max_length")


def _check_tool_use(params: dict[str, Any]) -> None:
    names = params.get("allowed_tools")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) and n for n in names)):
        raise _invalid("params", names, "— tool_use's allowed_tools is a list of tool names, e.g. [\"multiply\"]")
    if not isinstance(params.get("required", False), bool):
        raise _invalid("params", params["required"], "— tool_use's required is true or false")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_soft_overlong(params: dict[str, Any]) -> None:
    """DAPO's soft overlong punishment (TRL's ``get_soft_overlong_punishment``): its two lengths."""
    unknown = sorted(set(params) - {"max_completion_length", "soft_punish_cache"})
    if unknown:
        raise _invalid("params", unknown[0], "is not a soft_overlong parameter (max_completion_length, soft_punish_cache)")
    if "soft_punish_cache" not in params:
        raise _invalid("params", params, "— soft_overlong needs params.soft_punish_cache (tokens before the limit "
                                         "where the punishment starts, e.g. 4096 as in DAPO)")
    cache, limit = params["soft_punish_cache"], params.get("max_completion_length")
    if not _whole(cache) or cache < 0:
        raise _invalid("params", cache, "— soft_punish_cache must be a whole number of tokens >= 0")
    if limit is not None and (not _whole(limit) or limit < 1):
        raise _invalid("params", limit, "— max_completion_length must be a whole number of tokens >= 1")
    if limit is not None and cache > limit:
        raise _invalid("params", cache, f"— soft_punish_cache must not exceed max_completion_length ({limit})")


class JudgeConfig(_Section):
    """A judge model as a reward (docs/config.md, "[[rewards]]"): loaded once, never trained."""

    model: str  # an mlx-lm model folder or a hub id
    prompt: str  # the judge's input: {completion} (and {prompt}) filled in, through its chat template
    score: Literal["yes_probability", "number"] = "yes_probability"
    yes: str = "yes"  # score = "yes_probability": the answer whose first-token probability is the score
    max_tokens: int = 16  # score = "number": the reply's length (greedy), its first number is the score
    batch_size: int = 16  # judge inputs per forward pass

    def __post_init__(self) -> None:
        if "{completion}" not in self.prompt:
            raise _invalid("prompt", self.prompt[:60], "must contain {completion} (and may contain {prompt})")
        if not self.yes:
            raise _invalid("yes", self.yes, "must not be empty")
        if self.max_tokens < 1:
            raise _invalid("max_tokens", self.max_tokens, "must be at least 1")
        if self.batch_size < 1:
            raise _invalid("batch_size", self.batch_size, "must be at least 1")


class RewardConfig(_Section):
    name: str | None = None  # a built-in
    function: str | None = None  # custom: "file.py:func" or "module:func"
    judge: JudgeConfig | None = None  # a judge model
    weight: float = 1.0
    timeout_s: float = 30.0
    on_error: Literal["raise", "skip"] = "raise"
    params: dict[str, Any] = {}

    def __post_init__(self) -> None:
        if (self.name is not None) + (self.function is not None) + (self.judge is not None) != 1:
            raise _invalid("name", self.name, "— give exactly one of `name` (a built-in), `function` or `judge`")
        if self.name is not None and self.name not in BUILTIN_REWARDS:
            raise _invalid("name", self.name, "is not one of " + ", ".join(BUILTIN_REWARDS))
        if self.function is not None and not re.fullmatch(r"[^:]+:[A-Za-z_]\w*", self.function):
            raise _invalid("function", self.function, "is not of the form file.py:func or module:func")
        if self.timeout_s < 0:
            raise _invalid("timeout_s", self.timeout_s, "must be >= 0 (0: no limit)")
        if self.name == "soft_overlong":
            _check_soft_overlong(self.params)
        elif self.name is not None and (unknown := sorted(set(self.params) - set(BUILTIN_REWARD_PARAMS[self.name]))):
            takes = ", ".join(BUILTIN_REWARD_PARAMS[self.name]) or "none"
            raise _invalid("params", unknown[0], f"is not a parameter of the built-in reward {self.name!r} (it takes: {takes})")
        elif self.name == "length":
            _check_length(self.params)
        elif self.name == "tool_use":
            _check_tool_use(self.params)

    @property
    def label(self) -> str:
        """The name shown in reward breakdowns."""
        if self.judge is not None:
            return "judge"
        return self.name or str(self.function).rsplit(":", 1)[1]


class ToolConfig(_Section):
    """One function the model may call during its rollouts (docs/config.md, "Tools")."""

    function: str  # "file.py:func" or "module:func"; its signature and docstring make the schema
    timeout_s: float = 10.0  # per call; a call still running then is abandoned and reported
    sandbox: bool = False  # each call in a child process with limits (grpo_tui.sandbox; docs/agents.md)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[^:]+:[A-Za-z_]\w*", self.function):
            raise _invalid("function", self.function, "is not of the form file.py:func or module:func")
        if self.timeout_s <= 0:
            raise _invalid("timeout_s", self.timeout_s, "must be > 0")

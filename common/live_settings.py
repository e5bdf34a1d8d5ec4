"""Live settings: which keys a running run may change, and the one check every way in shares
(docs/steering.md).

A change is the ``KEY=VALUE`` text that ``--set`` reads; it is checked by the same code as
``--set`` (``config_overrides.apply_override`` over the run's effective config, then
``config.validate``), so a bad value gets the same sentence. Then the key must be one that can
change between two steps; any other is refused with one sentence that lists what can. The worker
applies a checked change at the next step boundary (``worker/live_settings.py``).
"""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

from grpo_tui.common.commands import run_command
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config, ConfigError, validate
from grpo_tui.protocol.config_base import attribute
from grpo_tui.protocol.config_overrides import apply_override, parse_key

# Keys that change between two steps and apply from the next step on; each reward's weight too.
LIVE_KEYS: tuple[str, ...] = (
    "training.learning_rate", "training.max_steps", "training.silent_patience",
    "generation.temperature", "generation.top_p", "generation.top_k", "generation.min_p",
    "generation.max_completion_length", "generation.repetition_penalty",
    "grpo.beta", "grpo.epsilon", "grpo.epsilon_high", "grpo.scale_rewards", "grpo.dynamic_sampling",
    "eval.every", "checkpoint.save_every",
    "curriculum.strategy", "curriculum.min_pass_rate", "curriculum.max_pass_rate", "curriculum.revisit_probability",
    "async.max_staleness", "async.weight_sync_steps",
)

# Why a key that looks tunable is not live (the rest are what the run is: its model, data, LoRA's
# shape, output folder, ranks).
NOT_LIVE: dict[str, str] = {
    "grpo.group_size": "the groups, the sample keys and the compiled shapes are built for it",
    "training.batch_size": "the data order of every step (and of a resume) follows from it",
    "training.gradient_accumulation_steps": "the micro-batches and the ranks' shares follow from it",
    "training.steps_per_generation": "the generation in hand was made and split for it",
}


def canonical_key(key: str) -> str:
    """``rewards.0.weight`` and ``rewards[0].weight`` alike as ``rewards[0].weight``."""
    out = ""
    for seg in parse_key(key.strip(), key, "<live>"):
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else seg)
    return out


def live_keys(config: Config) -> list[str]:
    """The keys this run may change live (``eval.every`` only with an ``[eval]`` table)."""
    keys = [k for k in LIVE_KEYS if k != "eval.every" or config.eval is not None]
    return keys + [f"rewards[{i}].weight" for i in range(len(config.rewards))]


def value_at(config: Config, key: str) -> Any:
    node: Any = config
    for seg in parse_key(key, key, "<live>"):
        node = node[seg] if isinstance(seg, int) else getattr(node, attribute(type(node), seg))
    return node


def set_value(config: Config | dict[str, Any], key: str, value: Any) -> None:
    """``key`` = ``value`` in a ``Config`` or its dict form (the dashboard's copy); a path the dict
    does not have changes nothing."""
    *path, last = parse_key(key, key, "<live>")
    node: Any = config
    for seg in path:
        try:
            node = node[seg] if isinstance(seg, int) or isinstance(node, dict) else getattr(node, attribute(type(node), str(seg)))
        except (KeyError, IndexError, TypeError, AttributeError):
            return
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list) and isinstance(last, int):
        node[last] = value
    else:
        setattr(node, attribute(type(node), str(last)), value)


def toml_value(value: Any) -> str:
    """A value as TOML text, what ``--set`` reads back (``5e-06``, ``true``, ``"group"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return json.dumps(value)


def check(config: Config, item: str, file: str) -> tuple[str, Any]:
    """(the key, its new value) of the ``KEY=VALUE`` text ``item`` over ``config``, the run's
    effective config; a ``ConfigError`` with ``--set``'s sentence for a bad value, or one that
    lists what can change for a key that cannot change live. ``file``: the run's config file, named
    in the sentence as ``--set`` names it."""
    raw = _unset_dropped(config.to_dict())
    apply_override(raw, item, file)
    changed = validate(raw, file)
    key = canonical_key(item.partition("=")[0])
    if key not in live_keys(config):
        raise ConfigError(key, refusal(config, key, item, file), file)
    return key, value_at(changed, key)


def _unset_dropped(value: Any) -> Any:
    """The config as the file would say it: a table that is not there (``[model.lora]``, ``[eval]``)
    is left out, not ``None``, so ``--set`` can create it as it does over the file."""
    if isinstance(value, dict):
        return {k: _unset_dropped(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_unset_dropped(v) for v in value]
    return value


def refusal(config: Config, key: str, item: str, file: str) -> str:
    """The sentence for a key that cannot change in a live run: why, what can, and how to get it."""
    why = NOT_LIVE.get(key, "the model, the data, LoRA's shape, the output folder and the ranks are what the run is")
    resume = run_command(file, "checkpoint.resume=latest", item)
    if key.startswith("model."):  # a fork keeps the model (its weights are that model's)
        how = f"train with it, stop the run and resume it so: {resume}"
    else:
        fork = f"`grpo-tui fork {shlex.quote(config.checkpoint.output_dir)} --set {shlex.quote(item)}`"
        how = f"train with it, fork the run: {fork} (a new run from its latest checkpoint), or stop it and resume it so: {resume}"
    return f"cannot change in a live run: {why}. These can: {', '.join(live_keys(config))}. To {how}"


def carried(changes: list[m.SettingChanged], overrides: list[str]) -> list[m.SettingChanged]:
    """The live changes a resume goes on with: a key that a ``--set`` of the resume names keeps the ``--set``."""
    named = {canonical_key(item.partition("=")[0]) for item in overrides}
    return [c for c in changes if c.key not in named]


def resume_note(changes: list[m.SettingChanged], config: Config) -> str | None:
    """What a resume with ``changes`` says, the worker's log and ``grpo-tui check`` alike (``config``:
    the file's, with the ``--set`` items): ``resuming with 1 live change: training.learning_rate 5e-06
    since step 120 (file: 1e-05)``."""
    if not changes:
        return None
    each = [f"{c.key} {toml_value(c.new)} since step {c.step} (file: {toml_value(value_at(config, c.key))})"
            for c in changes]
    return f"resuming with {len(changes)} live change{'s' if len(changes) > 1 else ''}: " + "; ".join(each)

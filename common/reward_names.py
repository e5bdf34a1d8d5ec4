"""The rule for a reward function's argument names, shared by the worker (before step 1, from the
imported function) and ``grpo-tui check`` (from the file's source), so both say the same thing.

A custom reward's keyword arguments are, in this order: TRL's own (``prompts``, ``completions``,
``completion_ids``, ``trainer_state``), the data's columns (TRL passes them all), then grpo-tui's
documented extras (``EXTRAS``) and the reward's ``params``. No extra shares a name with a column a
TRL user is likely to have (``LIKELY_COLUMNS``): the completion's text after thinking, once the
extra ``answer``, is ``completion_answer``, so a function that names ``answer`` with data whose
ground truth is in ``solution`` is told so instead of comparing the completion with itself. A named
parameter without a default that is none of these is a mistake that lists the data's columns.
"""

from __future__ import annotations

from collections.abc import Iterable

TRL_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state")

# Optional keyword arguments beyond TRL's (docs/config.md, "Reward functions"), passed to a function
# that names them or takes **kwargs.
EXTRAS = (
    "finish_reason",  # "stop" | "length" | "repetition"
    "thinking",  # the text inside <think>…</think>, None when there is none
    "completion_answer",  # the completion text after thinking
    "tool_calls",  # parsed <tool_call> blocks: {"name", "arguments", "status", "error"}
    "num_tokens",  # completion token counts
    "prompt_tokens",  # rendered prompt token counts
    "num_tool_calls",  # with [[tools]]: tool calls run during the completion
    "failed_tool_calls",  # with [[tools]]: those that returned an error (bad call, exception, timeout)
    "environments",  # with [environment]: each completion's environment instance (TRL's)
    "log_metric",  # log_metric(name, value): a scalar averaged per step into the step metrics
    "log_extra",  # log_extra(name, values): one text per completion, kept with the generations
)

# Column names a TRL dataset is likely to have: no extra may take one of them.
LIKELY_COLUMNS = ("answer", "answers", "solution", "label", "labels", "target", "ground_truth", "reference",
                  "expected", "gold", "output", "response", "question", "problem", "context", "tools", "task")

# Extras that were renamed because they shared a name with a likely column: old name -> new one.
RENAMED = {"answer": "completion_answer"}


def _listed(columns: Iterable[str]) -> str:
    return ", ".join(repr(c) for c in sorted(columns)) or "none besides the prompt"


def argument_problem(label: str, where: str, parameters: Iterable[tuple[str, bool]], columns: set[str],
                     params: set[str], data: str) -> str | None:
    """The first named parameter of reward ``label`` (defined at ``where``) that nothing fills, as
    one sentence; ``parameters``: (name, has a default) for each named parameter; ``columns``: the
    data's columns besides the prompt; ``params``: the reward's configured ``params``."""
    for name, has_default in parameters:
        if name in TRL_ARGUMENTS or name in columns or name in EXTRAS or name in params:
            continue
        if name in RENAMED:
            return (f"reward function {label!r} ({where}) takes {name!r}, which no row of {data} has (its columns: "
                    f"{_listed(columns)}); name the parameter after the column that holds what it compares with, or "
                    f"{RENAMED[name]} for the completion's text after thinking (grpo-tui's extra of that name)")
        if not has_default:
            return (f"reward function {label!r} ({where}) takes {name!r}, which is neither a column of {data} (its "
                    f"columns: {_listed(columns)}) nor an argument grpo-tui passes ({', '.join(TRL_ARGUMENTS + EXTRAS)}); "
                    "name a column, or give the parameter a default")
    return None

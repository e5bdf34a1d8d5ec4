"""The generations filter: what the user asked for, as SQL with parameters, and as one line of text.

User input reaches SQL only as ``?`` parameters; the only strings spliced into SQL come from the
fixed tables below (column names, operators), never from the user.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from grpo_tui.tui.db import search

Sort = Literal["step", "reward"]
SORTS: tuple[tuple[Sort, bool], ...] = (("step", True), ("step", False), ("reward", True), ("reward", False))
SHOWN_SEARCH = 60  # characters of the search text in the one-line summary: a pasted page never hides the table
FINISH_REASONS = ("stop", "length", "repetition")
# Tool-call filter values: a status of one call, or a property of the generation's calls.
TOOL_FILTERS = {
    "ok": "a tool call ok",
    "invalid_json": "a tool call with invalid JSON",
    "missing_name": "a tool call without name",
    "error": "a failed tool call",
    "any": "any tool call",
    "none": "no tool call",
}
# Dynamic sampling's filter values: generations whose group was dropped, or trained on.
SAMPLING_FILTERS = {"trained": "trained on", "dropped": "dropped (equal rewards)"}
# The curriculum's states of a prompt after a visit (docs/curriculum.md, the store's prompt_visits).
PROMPT_STATES = {"too_hard": "prompts too hard", "learning": "prompts being learned", "solved": "prompts solved"}


@dataclass(frozen=True)
class GenFilter:
    """Which generations to show and in what order. ``None`` / ``""`` means "no constraint"."""

    run_id: int | None = None
    step_min: int | None = None
    step_max: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    finish_reason: str | None = None
    tool_status: str | None = None
    tool_name: str | None = None  # generations with a call of this tool
    has_thinking: bool | None = None
    text: str = ""
    prompt_index: int | None = None  # with step_min == step_max: one group (the G completions of a prompt)
    dropped: bool | None = None  # dynamic sampling: True = dropped groups only, False = trained only
    prompt_state: str | None = None  # the curriculum: groups whose prompt was in this state after the visit
    history: tuple[int, int] | None = None  # (step, prompt_index): every visit of that group's prompt
    # the run doctor's evidence (docs/doctor.md): only these (step, prompt_index, group_index) generations
    keys: tuple[tuple[int, int, int], ...] = ()
    sort: Sort = "step"
    descending: bool = True

    def cleared(self) -> GenFilter:
        """The same run and sort order with every constraint removed."""
        return GenFilter(run_id=self.run_id, sort=self.sort, descending=self.descending)

    @property
    def is_clear(self) -> bool:
        return self == self.cleared()

    def with_next_sort(self) -> GenFilter:
        i = SORTS.index((self.sort, self.descending))
        sort, descending = SORTS[(i + 1) % len(SORTS)]
        return replace(self, sort=sort, descending=descending)

    def describe(self) -> str:
        """One human line, e.g. ``steps 10–20 · reward ≥ 0.5 · "seven" · sorted by reward ↓``."""
        parts = []
        if self.step_min is not None and self.step_min == self.step_max:
            parts.append(f"step {self.step_min}")
        elif self.step_min is not None or self.step_max is not None:
            parts.append(f"steps {_bound(self.step_min)}–{_bound(self.step_max)}")
        if self.prompt_index is not None:
            parts.append(f"group of prompt {self.prompt_index}")
        if self.keys:
            parts.append(f"the doctor's evidence ({len(self.keys)} generations)")
        if self.history is not None:
            parts.append(f"every visit of the prompt of step {self.history[0]} #{self.history[1]}")
        if self.reward_min is not None and self.reward_max is not None:
            parts.append(f"reward {self.reward_min:g}–{self.reward_max:g}")
        elif self.reward_min is not None:
            parts.append(f"reward ≥ {self.reward_min:g}")
        elif self.reward_max is not None:
            parts.append(f"reward ≤ {self.reward_max:g}")
        if self.finish_reason:
            parts.append(f"finish {self.finish_reason}")
        if self.tool_status:
            parts.append(TOOL_FILTERS.get(self.tool_status, self.tool_status))
        if self.tool_name:
            parts.append(f"tool {self.tool_name!r}")
        if self.has_thinking is not None:
            parts.append("with thinking" if self.has_thinking else "without thinking")
        if self.dropped is not None:
            parts.append(SAMPLING_FILTERS["dropped" if self.dropped else "trained"])
        if self.prompt_state:
            parts.append(PROMPT_STATES.get(self.prompt_state, self.prompt_state))
        if self.text:
            shown = self.text if len(self.text) <= SHOWN_SEARCH else self.text[: SHOWN_SEARCH - 1] + "…"
            parts.append(f"search {shown!r}")
        head = " · ".join(parts) if parts else "no filter"
        return f"{head} · sorted by {self.sort} {'↓' if self.descending else '↑'}"


def _bound(value: int | None) -> str:
    return "…" if value is None else str(value)


def where(f: GenFilter, alias: str = "g", match: bool = True) -> tuple[str, list[Any]]:
    """``(sql, params)`` for a WHERE clause (without the keyword) selecting ``f``'s generations.
    ``match=False``: without the search's FTS5 MATCH (the caller drives the scan from the index)."""
    a = alias
    clauses: list[str] = []
    params: list[Any] = []
    for column, op, value in (
        ("run_id", "=", f.run_id), ("step", ">=", f.step_min), ("step", "<=", f.step_max),
        ("reward", ">=", f.reward_min), ("reward", "<=", f.reward_max),
        ("finish_reason", "=", f.finish_reason), ("prompt_index", "=", f.prompt_index),
        ("dropped", "=", None if f.dropped is None else int(f.dropped)),
    ):
        if value is not None and value != "":
            # Sorted by step, the (run, step) index must drive the scan so LIMIT stops early; a unary
            # "+" keeps SQLite from picking the reward / finish index and then sorting every match.
            plus = "+" if f.sort == "step" and column in ("reward", "finish_reason") else ""
            clauses.append(f"{plus}{a}.{column} {op} ?")
            params.append(value)
    if f.keys:  # row values: (step, prompt, completion) IN (VALUES (?, ?, ?), ...)
        rows = ", ".join(["(?, ?, ?)"] * len(f.keys))
        clauses.append(f"({a}.step, {a}.prompt_index, {a}.group_index) IN (VALUES {rows})")
        params += [value for key in f.keys for value in key]
    visit = (f"SELECT 1 FROM prompt_visits v WHERE v.run_id = {a}.run_id AND v.step = {a}.step "
             f"AND v.prompt_index = {a}.prompt_index")
    if f.prompt_state:
        clauses.append(f"EXISTS ({visit} AND v.state = ?)")
        params.append(f.prompt_state)
    if f.history is not None:  # the visits of the same dataset row as the group at (step, prompt_index)
        clauses.append(f"EXISTS ({visit} AND v.prompt_row = (SELECT w.prompt_row FROM prompt_visits w "
                       f"WHERE w.run_id = {a}.run_id AND w.step = ? AND w.prompt_index = ?))")
        params += list(f.history)
    if f.has_thinking is True:
        clauses.append(f"({a}.thinking IS NOT NULL AND {a}.thinking != '')")
    elif f.has_thinking is False:
        clauses.append(f"({a}.thinking IS NULL OR {a}.thinking = '')")
    if f.tool_status:
        calls = f"SELECT 1 FROM tool_calls t WHERE t.generation_id = {a}.id"
        if f.tool_status == "none":
            clauses.append(f"NOT EXISTS ({calls})")
        elif f.tool_status == "any":
            clauses.append(f"EXISTS ({calls})")
        elif f.tool_status == "error":
            # a call that did not parse, or (agent rollouts) one that ran and failed
            clauses.append(f"EXISTS ({calls} AND (t.status != 'ok' OR t.error IS NOT NULL))")
        else:
            clauses.append(f"EXISTS ({calls} AND t.status = ?)")
            params.append(f.tool_status)
    if f.tool_name:
        clauses.append(f"EXISTS (SELECT 1 FROM tool_calls t WHERE t.generation_id = {a}.id AND t.name = ?)")
        params.append(f.tool_name)
    if (found := search.parse(f.text)) is not None:
        if match and found.match is not None:
            clauses.append(f"{a}.id IN (SELECT rowid FROM generations_fts WHERE generations_fts MATCH ?)")
            params.append(found.match)
        if found.like:
            like, like_params = search.like_sql(found, a)
            clauses.append(like)
            params += like_params
    return (" AND ".join(clauses) or "1"), params


def from_form(base: GenFilter, **raw: str | bool | None) -> tuple[GenFilter, list[str]]:
    """Parse text fields typed by the user into a filter; returns it and the fields that didn't parse.

    Fields that don't parse are left unconstrained (and reported) rather than guessed at.
    """
    known = {f.name for f in fields(GenFilter)}
    changes: dict[str, Any] = {}
    errors: list[str] = []
    for name, value in raw.items():
        if name not in known:
            raise KeyError(name)
        if name in ("step_min", "step_max", "prompt_index"):
            changes[name] = _parse(value, int, name, errors)
        elif name in ("reward_min", "reward_max"):
            changes[name] = _parse(value, float, name, errors)
        elif name == "text":
            changes[name] = (value or "").strip() if isinstance(value, str) else ""
        elif name == "tool_name":
            changes[name] = value.strip() or None if isinstance(value, str) else None
        else:
            changes[name] = value if value != "" else None
    return replace(base, **changes), errors


def _parse(value: Any, kind: type, name: str, errors: list[str]) -> Any:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return kind(value.strip() if isinstance(value, str) else value)
    except ValueError:
        errors.append(name)
        return None


def evidence_filter(run_id: int | None, steps: list[int], generations: list[tuple[int, int, int]],
                    finish_reason: str | None = None) -> GenFilter:
    """The generations a run doctor's finding points at (its ``Evidence``): those it names, within
    its steps; a finding of the step metrics names steps only, so every generation of those steps
    (with ``finish_reason``, those that share it)."""
    named = sorted({step for step, _, _ in generations}) or sorted(steps)
    return GenFilter(run_id=run_id, step_min=named[0] if named else None, step_max=named[-1] if named else None,
                     finish_reason=None if generations else finish_reason,
                     keys=tuple((s, p, g) for s, p, g in generations))

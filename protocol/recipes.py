"""``grpo.recipe``: the published settings of GSPO, DAPO and Dr. GRPO, as TRL's paper index lists
them (docs/source/paper_index.md), set before the config is validated. A key the user sets in the
file wins over the recipe; ``grpo-tui check`` says which keys the recipe set (``applied``).

Only the algorithm's keys: the papers' batch sizes, group sizes and lengths are their hardware's,
not the method (the paper index lists them as "other parameters used").
"""

from __future__ import annotations

from typing import Any

RECIPES: dict[str, dict[str, Any]] = {
    # GSPO paper (v2) section 5.1; beta 0 as in verl (the paper index's comments).
    "gspo": {"grpo.importance_sampling_level": "sequence", "grpo.loss_type": "grpo", "grpo.beta": 0.0,
             "grpo.epsilon": 3e-4, "grpo.epsilon_high": 4e-4},
    # DAPO section 4.1: overlong filtering, clip-higher, token-level loss, no KL, and its dynamic
    # sampling (TRL lacks it). The soft overlong punishment is a reward: add ``soft_overlong``.
    "dapo": {"grpo.mask_truncated_completions": True, "grpo.loss_type": "dapo", "grpo.epsilon": 0.2,
             "grpo.epsilon_high": 0.28, "grpo.beta": 0.0, "grpo.dynamic_sampling": True},
    # Dr. GRPO: its loss, no KL, and no std scaling of the advantages (TRL's scale_rewards docs:
    # "The Dr. GRPO paper recommends not scaling rewards").
    "dr_grpo": {"grpo.loss_type": "dr_grpo", "grpo.beta": 0.0, "grpo.scale_rewards": "none"},
}

NOTES: dict[str, str] = {
    "gspo": "GSPO's sequence-level ratio differs from GRPO only off-policy: with num_iterations > 1",
    "dapo": 'DAPO\'s soft overlong punishment is a reward: [[rewards]] name = "soft_overlong", '
            "params = { soft_punish_cache = ... }",
}


def _table(raw: dict[str, Any], section: str) -> dict[str, Any] | None:
    table = raw.setdefault(section, {})
    return table if isinstance(table, dict) else None


def apply(raw: dict[str, Any]) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """Set the recipe's keys that ``raw`` (the parsed TOML) leaves out. Returns (keys the recipe
    set, keys the user set that the recipe would have set), each as (``section.key``, value). An
    unknown recipe name is left to the schema's check, which names the allowed ones."""
    grpo = raw.get("grpo")
    recipe = grpo.get("recipe") if isinstance(grpo, dict) else None
    if not isinstance(recipe, str) or recipe not in RECIPES:
        return [], []
    applied, kept = [], []
    for dotted, value in RECIPES[recipe].items():
        section, key = dotted.split(".")
        table = _table(raw, section)
        if table is None:
            continue
        if key in table:
            kept.append((dotted, table[key]))
        else:
            table[key] = value
            applied.append((dotted, value))
    return applied, kept


def report(text: str) -> list[str]:
    """``grpo-tui check``'s lines about the recipe of a config's TOML ``text`` (valid already)."""
    import tomllib

    raw = tomllib.loads(text)
    recipe = (raw.get("grpo") or {}).get("recipe")
    if recipe not in RECIPES:
        return []
    applied, kept = apply(raw)
    lines = [f"grpo.recipe = {recipe!r} set: " + (", ".join(f"{k} = {_toml(v)}" for k, v in applied) or "nothing")]
    if kept:
        lines.append("kept from the file (they win over the recipe): " + ", ".join(f"{k} = {_toml(v)}" for k, v in kept))
    if recipe in NOTES:
        lines.append("note: " + NOTES[recipe])
    return lines


def _toml(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else repr(value) if not isinstance(value, str) \
        else f'"{value}"'

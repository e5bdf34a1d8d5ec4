"""The scorer's side of a step: completions -> scores and what they logged (reward functions, judges, tools, environments); docs/architecture.md, "Engine by stage"."""

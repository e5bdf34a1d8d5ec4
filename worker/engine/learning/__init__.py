"""The learner's side of a step: a scored batch -> an update (GRPO math, log-probs, loss, optimizer, schedule, memory switches); docs/architecture.md, "Engine by stage"."""

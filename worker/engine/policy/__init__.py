"""The policy's side of a step: prompts -> completions (rollout, sampling, agent rollouts, TRL's rollout_func, the HTTP endpoint); docs/architecture.md, "Engine by stage"."""

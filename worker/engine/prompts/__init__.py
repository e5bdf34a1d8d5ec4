"""The prompts: dataset rows read, rendered and ordered into steps; docs/architecture.md, "Engine by stage"."""

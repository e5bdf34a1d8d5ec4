"""``[eval]``: held-out evaluation between steps (docs/config.md)."""

from __future__ import annotations


from grpo_tui.protocol.config_base import Section, invalid

class EvalConfig(Section):
    """Held-out evaluation between steps; on when the ``[eval]`` table is present."""

    every: int = 50  # steps between evaluations; 0 = only at the start and the end
    at_start: bool = True
    at_end: bool = True
    limit: int = 0  # prompts; 0 = all
    greedy: bool = True
    # with greedy: a second, sampled pass over the same prompts, so one run reports both (the
    # greedy answer is what the policy "knows"; the sampled one is what training sees)
    also_sampled: bool = False
    num_samples: int = 1  # completions per prompt of the sampled pass; > 1 adds pass@k
    batch_size: int = 16  # prompts per generation batch (commands are answered between batches)

    def __post_init__(self) -> None:
        if self.every < 0:
            raise invalid("every", self.every, "must be >= 0 (0 = only at the start and the end)")
        if self.limit < 0:
            raise invalid("limit", self.limit, "must be >= 0 (0 = every eval prompt)")
        if self.num_samples < 1:
            raise invalid("num_samples", self.num_samples, "must be at least 1")
        if self.num_samples > 1 and self.greedy and not self.also_sampled:
            raise invalid("num_samples", self.num_samples,
                          "needs eval.greedy = false or eval.also_sampled = true (greedy samples are identical)")
        if self.also_sampled and not self.greedy:
            raise invalid("also_sampled", self.also_sampled,
                          "needs eval.greedy = true (with greedy = false the evaluation already samples)")
        if self.batch_size < 1:
            raise invalid("batch_size", self.batch_size, "must be at least 1")

    def passes(self) -> list[tuple[bool, int]]:
        """(greedy, completions per prompt) of each pass an evaluation makes, greedy first."""
        if self.greedy and self.also_sampled:
            return [(True, 1), (False, self.num_samples)]
        return [(self.greedy, 1 if self.greedy else self.num_samples)]

"""A format reward beside the built-in `reasoning_gym` (which scores the answer with the task's own
scorer). Called as TRL calls reward functions: one value per completion."""

import re


def answer_tag(completions, **kwargs):
    """1.0 when the completion holds exactly one <answer>...</answer>, else 0.0."""
    scores = []
    for completion in completions:
        text = completion[0]["content"] if isinstance(completion, list) else completion
        scores.append(1.0 if len(re.findall(r"<answer>.*?</answer>", text, re.DOTALL)) == 1 else 0.0)
    return scores

"""Rewards for GSM8K-style data: the final answer follows "####", in the dataset's `answer` column and
in the model's completion. Called as TRL calls reward functions: every dataset column arrives as a
keyword argument (here `answer`), one value per completion."""

import re

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_number(text: str) -> str | None:
    """The number after the last "####" (commas dropped), or None."""
    if "####" in text:
        found = _NUMBER.search(text.rsplit("####", 1)[1])
    else:  # no "####": the last number of the text, as GSM8K's flexible graders read it
        found = next(reversed(list(_NUMBER.finditer(text))), None)
    return found.group(0).replace(",", "").rstrip(".") if found else None


def correct(completions, answer, **kwargs):
    """1.0 when the completion's number after #### equals the dataset's, else 0.0."""
    scores = []
    for completion, expected in zip(completions, answer):
        text = completion[0]["content"] if isinstance(completion, list) else completion
        got, want = final_number(text), final_number(expected)
        scores.append(1.0 if got is not None and want is not None and float(got) == float(want) else 0.0)
    return scores


def ends_with_answer(completions, **kwargs):
    """1.0 when the completion ends with "#### <number>", 0.5 when it has "####" elsewhere, else 0.0."""
    scores = []
    for completion in completions:
        text = completion[0]["content"] if isinstance(completion, list) else completion
        if re.search(r"####\s*-?\d[\d,]*(?:\.\d+)?\s*$", text):
            scores.append(1.0)
        else:
            scores.append(0.5 if "####" in text else 0.0)
    return scores

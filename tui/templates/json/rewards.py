"""A reward for the json template besides the built-in json_schema check: the object is about the
row's city. Called as TRL calls reward functions: the dataset's `city` column arrives as a keyword
argument, one value per completion."""

import json


def first_object(text: str):
    """The first JSON object in the text, or None."""
    start = text.find("{")
    while start != -1:
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
            if isinstance(value, dict):
                return value
        except ValueError:
            pass
        start = text.find("{", start + 1)
    return None


def names_the_city(completions, city, **kwargs):
    """1.0 when the object's "city" is the row's city (case-insensitive), else 0.0."""
    scores = []
    for completion, expected in zip(completions, city):
        text = completion[0]["content"] if isinstance(completion, list) else completion
        value = first_object(text)
        got = value.get("city") if value else None
        scores.append(1.0 if isinstance(got, str) and got.strip().lower() == expected.lower() else 0.0)
    return scores

"""The tool of the tools template. The function's name is the tool's name; its type hints and
Google-style docstring make the JSON schema the chat template gets (`tools=`)."""


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b

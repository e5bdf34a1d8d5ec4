"""The agent demo's tool (examples/agent_calculator.toml). Its type hints and docstring are the
schema the chat template gets; the model calls it as
<tool_call>{"name": "multiply", "arguments": {"a": 12, "b": 34}}</tool_call>."""


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b

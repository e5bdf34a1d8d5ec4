"""A reward for the tools template: a small bonus for a successful tool call. With [[tools]] the
completions arrive as TRL's message lists (assistant turns with tool_calls, tool results), and
`num_tool_calls` / `failed_tool_calls` count each completion's calls."""


def used_the_tool(completions, num_tool_calls, failed_tool_calls, **kwargs):
    """1.0 when the completion called the tool and no call failed, else 0.0."""
    return [1.0 if n > 0 and failed == 0 else 0.0 for n, failed in zip(num_tool_calls, failed_tool_calls)]

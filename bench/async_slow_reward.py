"""A reward that waits 1 ms per completion (a judge, a sandboxed test run, a service), paid nothing:
``bench/async_grpo.py``'s case (b)."""

import time


def wait_1ms(completions, **kwargs):
    time.sleep(0.001 * len(completions))
    return [0.0] * len(completions)

"""Freed memory is reused instead of page-faulted back in every step (Linux/glibc)."""

import subprocess
import sys

import pytest

PROBE = """
import resource, mlx.core as mx
from grpo_tui.worker.engine.models.plan import prepare_process
print(prepare_process())  # reads GRPO_TUI_KEEP_FREED_MEMORY
def big():
    a = mx.ones((50_000_000,))  # 200 MB: above glibc's largest mmap threshold
    mx.eval(a)
    del a
big()  # the first one always faults its pages in
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
big()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _probe(keep: str) -> tuple[str, int]:
    env = {"GRPO_TUI_KEEP_FREED_MEMORY": keep, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True, timeout=120)
    applied, faults = out.stdout.split()
    return applied, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_second_big_array_reuses_the_first_ones_memory():
    applied, faults = _probe("1")
    assert applied == "True"
    assert faults < 5_000  # pages; 200 MB would be ~49,000


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_the_switch_leaves_glibc_defaults():
    applied, faults = _probe("0")
    assert applied == "False"
    assert faults > 40_000  # every page of the second array faulted in again

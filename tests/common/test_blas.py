import os
import subprocess
import sys

import pytest

from grpo_tui.common.blas import active_blas, child_env, describe, find_blas, preloaded

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="BLAS preload is Linux-only")


def test_off_means_no_preload():
    assert find_blas("off") is None
    env = child_env("off", base={"PATH": "/bin"})
    assert "LD_PRELOAD" not in env


def test_explicit_missing_path_is_none(tmp_path):
    assert find_blas(str(tmp_path / "nope.so")) is None


@linux_only
def test_child_env_keeps_existing_preloads(tmp_path):
    lib = tmp_path / "libfake.so"
    lib.write_bytes(b"")
    env = child_env(str(lib), base={"LD_PRELOAD": "/x/libother.so"})
    assert preloaded(env) == ["/x/libother.so", str(lib)]


@linux_only
def test_active_blas_is_verified_in_a_child_process():
    """What a child started with child_env() really uses is the library we chose."""
    code = "import mlx.core as mx; from grpo_tui.common.blas import active_blas; print(active_blas())"
    lib = find_blas("auto")
    env = child_env("auto")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    if lib is None:
        assert "blas" in out.stdout.lower()
    else:  # the library the environment preloads (this session's own re-exec may have chosen it
        # already, from another prefix when MKL is installed both in the venv and system-wide)
        assert out.stdout.strip() in {os.path.realpath(p) for p in preloaded(env)}
    off = subprocess.run(
        [sys.executable, "-c", code], env={**child_env("off"), "LD_PRELOAD": ""}, capture_output=True, text=True
    )
    assert "libblas" in off.stdout and "slow" in describe(off.stdout.strip())


def test_this_test_session_reports_its_blas():
    import mlx.core  # noqa: F401

    assert active_blas()

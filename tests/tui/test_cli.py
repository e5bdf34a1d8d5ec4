import subprocess
import sys

from grpo_tui.protocol import __version__


def grpo_tui(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "grpo_tui.tui.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_version():
    out = grpo_tui("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"grpo-tui {__version__}"


def test_help_for_every_subcommand():
    for sub in ("run", "worker", "browse", "check", "compare"):
        out = grpo_tui(sub, "--help")
        assert out.returncode == 0 and "usage: grpo-tui" in out.stdout


def test_check_prints_the_resolved_quickstart(root):
    out = grpo_tui("check", str(root / "examples" / "quickstart.toml"))
    assert out.returncode == 0, out.stderr
    assert "[grpo]" in out.stdout and 'loss_type = "dapo"' in out.stdout
    assert str(root / "examples" / "data" / "arith.jsonl") in out.stdout


def test_check_missing_file_is_one_clear_line(tmp_path):
    out = grpo_tui("check", "missing.toml", cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0
    assert "missing.toml" in out.stderr and "not found" in out.stderr and "Traceback" not in out.stderr


def test_check_bad_loss_type_is_one_clear_line(root, tmp_path):
    text = (root / "examples" / "quickstart.toml").read_text().replace('"dapo"', '"dpo"')
    bad = root / "examples" / "_bad_loss_type.toml"
    bad.write_text(text)
    try:
        out = grpo_tui("check", str(bad))
    finally:
        bad.unlink()
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0
    assert "grpo.loss_type: 'dpo' is not one of grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo" in out.stderr


def test_browse_missing_file(tmp_path):
    out = grpo_tui("browse", str(tmp_path / "nope.db"))
    assert out.returncode != 0 and "Traceback" not in out.stderr and "nope.db" in out.stderr


def test_compare_names_the_folder_that_is_not_a_run(tmp_path):
    (tmp_path / "empty").mkdir()
    out = grpo_tui("compare", str(tmp_path / "empty"), str(tmp_path / "nope"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (f"grpo-tui: {tmp_path / 'empty'}: not a run folder; name a run's output folder "
                                  "(`grpo-tui ls` lists runs).")


def test_no_command_prints_help():
    out = grpo_tui()
    assert out.returncode == 2 and "usage" in out.stdout

"""``--set key=value`` over a config file: parsed as TOML, checked like the file's keys, errors name
the key; the same on ``check``, ``worker`` (the real worker trains with it) and ``run``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import decode_event
from grpo_tui.protocol.config import ConfigError, load_config


def test_values_are_toml_and_land_on_their_keys(root):
    config = load_config(
        root / "examples" / "quickstart.toml",
        overrides=[
            "training.learning_rate=1e-5", "grpo.beta=0.04", 'generation.stop=["\\n\\n"]',
            "rewards[1].weight=0.5", "rewards.2.name=length", "model.lora={rank = 4}",
            "name=two words", "model.path=examples/models/tiny-arith",
        ],
        check_paths=False,
    )
    assert config.training.learning_rate == 1e-5 and config.grpo.beta == 0.04
    assert config.generation.stop == ["\n\n"]
    assert [(r.name, r.weight) for r in config.rewards] == [("accuracy", 1.0), ("xml_format", 0.5), ("length", 1.0)]
    assert config.model.lora is not None and config.model.lora.rank == 4
    assert config.name == "two words"  # not TOML: taken as the string it is


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("grpo.beta=lots", "grpo.beta: 'lots' is not a number"),
        ("grpo.betta=1", "grpo.betta: unknown key (expected one of: group_size,"),
        ("grpo.loss_type=dpo", "grpo.loss_type: 'dpo' is not one of grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo"),
        ("training.learning_rate", "training.learning_rate: --set 'training.learning_rate' has no '='"),
        ("rewards[7].weight=1", "rewards[7].weight: --set: index 7 is past the end (there are 2"),
        ("grpo..beta=1", "grpo..beta: --set 'grpo..beta=1': 'grpo..beta' is not a key path"),
        ("grpo.beta.x=1", "grpo.beta.x: --set: 'x' cannot index a value here"),
    ],
)
def test_errors_name_the_key(root, item, message):
    with pytest.raises(ConfigError) as err:
        load_config(root / "examples" / "quickstart.toml", overrides=[item])
    assert message in str(err.value)


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_check_shows_the_overridden_config_and_a_bad_value_is_one_line(root):
    quick = str(root / "examples" / "quickstart.toml")
    out = cli("check", quick, "--set", "training.learning_rate=2e-5", "--set", "grpo.beta=0.04")
    assert out.returncode == 0, out.stderr
    assert "learning_rate = 2e-05" in out.stdout and "beta = 0.04" in out.stdout
    out = cli("check", quick, "--set", "grpo.beta=lots")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert "grpo.beta: 'lots' is not a number" in out.stderr and "Traceback" not in out.stderr


def test_the_worker_trains_with_the_overrides(root, tmp_path):
    quick = str(root / "examples" / "quickstart.toml")
    out = cli("worker", quick, "--plain", "--set", "training.max_steps=3", "--set", "grpo.beta=0.04",
              "--set", f"checkpoint.output_dir='{tmp_path / 'out'}'", "--set", "eval.limit=8",
              "--set", "eval.every=0", "--set", "training.learning_rate=3e-5")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "completed: 3 steps" in out.stdout
    events = [decode_event(line) for line in (tmp_path / "out" / "run.jsonl").read_bytes().splitlines()]
    resolved = next(e for e in events if isinstance(e, m.Init)).config
    assert resolved["grpo"]["beta"] == 0.04 and resolved["training"]["learning_rate"] == 3e-5
    assert [e.step for e in events if isinstance(e, m.Step)] == [1, 2, 3]
    assert [e.num_prompts for e in events if isinstance(e, m.Eval)] == [8, 8]  # eval.limit, at start and end


def test_run_hands_the_overrides_to_the_worker_it_starts(root, monkeypatch):
    import grpo_tui.tui.app as app
    from grpo_tui.tui.cli import main

    seen = {}

    def fake_dashboard(path, config, worker_args):
        seen.update(config=config, worker_args=list(worker_args))
        return 0

    monkeypatch.setattr(app, "run_dashboard", fake_dashboard)
    monkeypatch.setattr("grpo_tui.tui.cli.no_screen", lambda: None)  # as in a terminal: pytest's stdout is none
    assert main(["run", str(root / "examples" / "quickstart.toml"), "--set", "grpo.beta=0.04", "--ranks", "1"]) == 0
    assert seen["config"].grpo.beta == 0.04  # the dashboard shows the overridden config
    assert seen["worker_args"] == ["--ranks", "1", "--set", "grpo.beta=0.04"]  # and the worker trains with it

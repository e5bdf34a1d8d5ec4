"""No false alarms (docs/doctor.md): runs that learn raise no warning or critical finding, over three
seeds each, with the doctor's default marks and window. The quickstart, the agent demo and the
``init tools`` template, each cut to a few steps on its bundled tiny model (the doctor judges from
half a window, step 5, on), and the quickstart's seed 0 whole; the real worker, its ``finding``
frames read back from run.jsonl.

The ``math`` and ``json`` templates, as ``init`` writes them, run on a bundled placeholder model (the
arithmetic model, until the SWITCH to a hub model) that cannot do their task: its completions loop
to the length limit. What their user should see is exactly that, and nothing else, from the doctor's
first judgement (step 5): critical ``truncation`` and ``repetition`` (both true: every completion is
cut and repeats itself), which their config's header comment announces; the all-0 groups are still
info then (a run that learns starts so too). ``reasoning-gym`` needs a package CI does not install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import decode_event
from tests.helpers.worker_harness import ROOT

SEEDS = (0, 1, 2)
# (the config, the --set items that make it short): steps enough for the doctor to judge, and no more
RUNS = {
    "quickstart": (ROOT / "examples" / "quickstart.toml", ["training.max_steps=10", "eval.every=0"]),
    "agent_demo": (ROOT / "examples" / "agent_calculator.toml", ["training.max_steps=6", "training.batch_size=4"]),
    "init_tools": ("tools", ["training.max_steps=10", "eval.every=0"]),  # a template: as `init` writes it
    "init_math": ("math", ["training.max_steps=10", "eval.every=0"]),
}
TRUE_ON_THE_PLACEHOLDER = {("repetition", "critical"), ("truncation", "critical")}  # the json template's
PLACEHOLDER_RUN = ["training.max_steps=5", "training.batch_size=2", "eval.every=0"]  # the doctor's first judgement


def init(template: str, folder: Path) -> Path:
    """The template as `grpo-tui init` writes it; its config's path."""
    done = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "init", template, str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return folder / "config.toml"


def findings_of(config: Path, out: Path, seed: int, sets: list[str]) -> list[m.Finding]:
    args = [sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain",
            "--set", f"checkpoint.output_dir='{out}'", "--set", "checkpoint.save_every=0",
            "--set", f"training.seed={seed}", "--set", f"data.seed={seed}"]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    frames = [decode_event(line) for line in (out / "run.jsonl").read_bytes().splitlines()]
    return [e for e in frames if isinstance(e, m.Finding)]


def loud_findings(found: list[m.Finding]) -> list[str]:
    return [f"{f.name} {f.severity} at step {f.step}: {f.message}" for f in found if f.severity != "info" and not f.cleared]


def test_the_whole_quickstart_raises_nothing_above_info(tmp_path):
    """Seed 0 of the quickstart, as shipped (its 200 steps, eval off): every judgement of a whole run
    that learns, the first ten steps among them."""
    assert loud_findings(findings_of(RUNS["quickstart"][0], tmp_path / "out", 0, ["eval.every=0"])) == []


# the quickstart's seed 0 runs whole above
@pytest.mark.parametrize(("name", "seed"), [(n, s) for n in sorted(RUNS) for s in SEEDS if (n, s) != ("quickstart", 0)])
def test_a_run_that_learns_raises_nothing_above_info(name, seed, tmp_path):
    config, sets = RUNS[name]
    if isinstance(config, str):
        config = init(config, tmp_path / config)
    assert loud_findings(findings_of(config, tmp_path / "out", seed, sets)) == []


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("template", ["json"])
def test_a_template_on_its_placeholder_model_says_exactly_what_is_true(template, seed, tmp_path):
    config = init(template, tmp_path / template)
    assert "critical truncation and\n# repetition" in config.read_text()  # the user is told before the run
    found = findings_of(config, tmp_path / "out", seed, PLACEHOLDER_RUN)
    loud = {(f.name, f.severity) for f in found if f.severity != "info" and not f.cleared}
    assert loud == TRUE_ON_THE_PLACEHOLDER, [f.message for f in found]
    shares = {f.name: f.numbers for f in found if (f.name, f.severity) in TRUE_ON_THE_PLACEHOLDER}
    assert shares["truncation"]["truncated_share"] >= 0.9 and shares["repetition"]["repeating_share"] >= 0.9

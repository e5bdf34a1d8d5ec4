"""bench/step_vs_peers.py's command line and table: grpo-tui variants run in the same invocation
as their own rows (the runs themselves are a bench, never a test)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import step_vs_peers  # noqa: E402


def _result(seconds: float, peak: float) -> dict:
    step = {"s": seconds, "cpu_s": 2 * seconds, "generation_s": seconds / 2, "training_s": seconds / 2,
            "generated_tokens": 256, "training_tokens": 300, "peak_memory_mb": peak, "max_rss_mb": peak + 500}
    return {"steps": [step, step], "params": 1_000_000}


def test_a_variant_runs_after_grpo_tui_with_its_switches_and_gets_its_own_row(monkeypatch, tmp_path, capsys):
    runs = []

    def run_system(system, work, model, rows, logs, timeout, label=None, **extra):
        runs.append((system, label, extra.get("training")))
        return _result(10.0 if label is None else 12.5, 9000.0 if label is None else 8000.0)

    monkeypatch.setattr(step_vs_peers, "run_system", run_system)
    monkeypatch.setattr(step_vs_peers, "BENCH", tmp_path)
    step_vs_peers.main(["--shape", "demo", "--systems", "grpo-tui", "--steps", "1", "--no-memory-probe",
                        "--grpo-tui-variant", '{"logprob_batch_size": 2}'])
    assert runs == [("grpo-tui", None, {}), ("grpo-tui", "grpo-tui[logprob_batch_size=2]", {"logprob_batch_size": 2})]
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.endswith(("MB   ", "×"))}
    variant = rows["grpo-tui[logprob_batch_size=2]"]
    assert "8000 MB" in variant and "1.25× / 1.25×" in variant  # its time against grpo-tui's default
    assert "9000 MB" in rows["grpo-tui"]

"""bench/memory.py's shapes and its full-depth table (the measuring itself is a bench, never a test)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import memory  # noqa: E402
import memory_table  # noqa: E402
import shapes  # noqa: E402


@pytest.mark.parametrize(("shape", "billions"), [("0.6b", 0.60), ("1.7b", 1.72), ("4b", 4.02)])
def test_qwen3_shapes_have_the_published_sizes(shape, billions):
    assert shapes.param_count(shapes.QWEN3_SHAPES[shape][1]) / 1e9 == pytest.approx(billions, abs=0.01)


def _linear_measure(calls):
    """A stand-in for one runner process: figures that grow by a known amount per layer."""

    def measure(shape, layers, finetune, mode, *rest):
        calls.append((shape, layers, finetune, mode))
        base = 10.0 if finetune == "full" else 2.0
        return {"peak_gib": base + 0.4 * layers, "rss_gib": base + 0.5 * layers, "s": 10.0 * layers,
                "training_s": 5.0 * layers, "training_cpu_s": 6.0 * layers}

    return measure


def test_shape_option_measures_its_shallow_depths_and_extrapolates_to_full_depth(tmp_path, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(memory, "measure", _linear_measure(calls))
    monkeypatch.setattr(memory, "BENCH", tmp_path)
    assert memory.main(["--shape", "4b", "--finetune", "full,lora", "--modes", "default"]) == 0
    assert calls == [("4b", 1, "full", "default"), ("4b", 2, "full", "default"),
                     ("4b", 1, "lora", "default"), ("4b", 2, "lora", "default")]
    out = capsys.readouterr().out
    assert "~36 full  default" in out and "(extrapolated from 1 and 2 layers)" in out
    record = json.loads(next(tmp_path.glob("memory-*.json")).read_text())
    full = {r["finetune"]: r for r in record["full"]}
    assert full["full"]["peak_gib"] == pytest.approx(10.0 + 0.4 * 36)
    assert full["lora"]["rss_gib"] == pytest.approx(2.0 + 0.5 * 36)
    # 24.4 GiB peak fits neither machine; LoRA's 20 GiB resident fits 24 GiB but not 16.
    assert "| 4b (36 layers) | full | default | 59.9 | 24.4 | 28.0 | extrapolated from 1 and 2 layers | no | no |" in out
    assert "| 4b (36 layers) | lora | default | 15.0 | 16.4 | 20.0 | extrapolated from 1 and 2 layers | no | yes |" in out


def test_a_measured_full_depth_is_used_as_it_is_and_checks_the_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(memory, "measure", _linear_measure([]))
    monkeypatch.setattr(memory, "BENCH", tmp_path)
    memory.main(["--layers", "4,8,28", "--finetune", "lora", "--modes", "switches"])
    (row,) = json.loads(next(tmp_path.glob("memory-*.json")).read_text())["full"]
    assert row["from"] is None and row["peak_gib"] == pytest.approx(2.0 + 0.4 * 28)
    out = capsys.readouterr().out
    assert "    28 lora  switches      13.20     16.00" in out
    assert "   ~28 lora  switches      13.20     16.00" in out and "(extrapolated from 4 and 8 layers, to check" in out


def test_table_takes_the_latest_run_of_each_configuration(tmp_path):
    def run(name, shape, peak, source=(2, 4)):
        row = {"shape": shape, "finetune": "lora", "mode": "switches", "layers": 28, "from": source,
               "peak_gib": peak, "rss_gib": peak + 1, "s": 1, "training_s": 1, "training_cpu_s": 1}
        (tmp_path / name).write_text(json.dumps({"full": [row]}))

    run("memory-20261201-100000.json", "1.7b", 30.0)
    run("memory-20261201-110000.json", "1.7b", 9.0)
    run("memory-20261201-105000.json", "0.6b", 3.0, None)  # measured at full depth
    run("memory-20261201-120000.json", "0.6b", 2.5)  # a later extrapolation does not replace it
    rows = memory_table.latest(sorted(tmp_path.glob("*.json")))
    assert sorted((r["shape"], r["peak_gib"]) for r in rows) == [("0.6b", 3.0), ("1.7b", 9.0)]
    assert "16 GiB, lora: 1.7b (switches)" in memory_table.largest(rows)
    assert "16 GiB, full: none of the shapes" in memory_table.largest(rows)

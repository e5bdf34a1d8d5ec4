"""Checkpoints are described from safetensors headers: step, kind, size, parameters, dtype."""

import json

import numpy as np
from safetensors.numpy import save_file

from grpo_tui.tui.checkpoint_list import describe_checkpoints
from grpo_tui.tui.format import human_size


def test_lists_checkpoints_with_header_numbers(tmp_path):
    a = tmp_path / "checkpoint-20"
    a.mkdir()
    save_file({"w": np.zeros((4, 8), np.float32), "b": np.zeros(8, np.float32)}, str(a / "model.safetensors"))
    save_file({"m": np.zeros((1000,), np.float32)}, str(a / "optimizer.safetensors"))  # not model weights
    final = tmp_path / "final"
    final.mkdir()
    save_file({"lora": np.zeros((2, 3), np.float16)}, str(final / "adapters.safetensors"))
    (final / "training_state.json").write_text(json.dumps({"step": 40}))
    (tmp_path / "checkpoint-30.tmp").mkdir()  # a save in progress is not listed
    (tmp_path / "outputs.db").write_text("")

    infos = describe_checkpoints(tmp_path, kinds={str(a): "manual"})
    assert [(i.step, i.kind, i.parameters, i.dtypes) for i in infos] == [
        (20, "manual", 40, ("F32",)),
        (40, "final", 6, ("F16",)),
    ]
    assert infos[0].size_bytes > 4000  # the optimizer file counts towards the size on disk


def test_a_corrupt_file_is_listed_without_numbers(tmp_path):
    c = tmp_path / "checkpoint-5"
    c.mkdir()
    (c / "model.safetensors").write_bytes(b"\x00garbage")
    [info] = describe_checkpoints(tmp_path)
    assert info.step == 5 and info.parameters == 0 and info.dtypes == ()


def test_a_checkpoint_pruned_while_it_is_described_is_left_out(tmp_path, monkeypatch):
    """The worker prunes old checkpoints (keep_last) while the dashboard scans: a folder listed and
    then gone is left out, never an error (it failed the crash-restart test, once)."""
    import grpo_tui.tui.checkpoint_list as checkpoints

    kept = tmp_path / "checkpoint-6"
    kept.mkdir()
    (kept / "model.safetensors").write_bytes(b"")
    pruned = tmp_path / "checkpoint-5"
    pruned.mkdir()
    listed = checkpoints.list_checkpoints(tmp_path)
    pruned.rmdir()
    monkeypatch.setattr(checkpoints, "list_checkpoints", lambda _: listed)
    assert [i.step for i in describe_checkpoints(tmp_path)] == [6]


def test_missing_folder_and_sizes(tmp_path):
    assert describe_checkpoints(tmp_path / "nope") == []
    assert human_size(512) == "512 B" and human_size(3 * 1024 * 1024) == "3.0 MB"

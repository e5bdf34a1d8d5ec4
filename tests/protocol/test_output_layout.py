"""protocol/layout.py: the output folder's names and training_state.json, shared by both sides."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import get_args

import pytest

from grpo_tui.protocol import layout
from grpo_tui.protocol import messages as m
from grpo_tui.common.tomlout import dumps


@pytest.mark.parametrize("kind", get_args(m.CheckpointKind))
def test_every_checkpoint_kind_has_a_folder_name_that_parses_back(kind):
    name = layout.checkpoint_dir_name(kind, 50)
    parsed = layout.parse_checkpoint_dir_name(name)
    assert parsed is not None
    folder_kind, step = parsed
    assert folder_kind == ("periodic" if kind == "manual" else kind)
    assert step == (None if kind == "final" else 50)


def test_folder_names():
    assert layout.checkpoint_dir_name("periodic", 50) == "checkpoint-50"
    assert layout.checkpoint_dir_name("emergency", 7) == "emergency-7"
    assert layout.checkpoint_dir_name("final", 7) == "final"
    assert layout.last_good_dir_name(4) == "last-good-4"
    assert layout.parse_checkpoint_dir_name("last-good-4") == ("last_good", 4)
    assert layout.parse_checkpoint_dir_name("emergency-9-sigterm") == ("emergency", 9)
    for other in ("checkpoint-30.tmp", ".tmp-checkpoint-3", "outputs.db", "previous-20250101-000000", "checkpoint-"):
        assert layout.parse_checkpoint_dir_name(other) is None, other
    assert set(layout.FOLDER_KINDS) == {"periodic", "final", "emergency", "last_good"}


def test_training_state_round_trip_and_lenient_step(tmp_path: Path):
    state = layout.TrainingState(
        step=5, epoch=0, step_in_epoch=5, kind="periodic", run_id=1, seed=0, dataset_size=10,
        dataset_hash="h", config_digest="d", total_steps=20, epoch_indices_done=[1, 2],
    )  # fmt: skip
    path = layout.write_state(tmp_path, state)
    assert path == tmp_path / layout.STATE_FILE
    assert layout.read_state(tmp_path) == state and layout.read_step(tmp_path) == 5
    path.write_text('{"step": 9}')  # not a complete state, but its step is readable
    assert layout.read_state(tmp_path) is None and layout.read_step(tmp_path) == 9
    path.write_text("{not json")
    assert layout.read_state(tmp_path) is None and layout.read_step(tmp_path) is None
    assert layout.read_state(tmp_path / "missing") is None


def test_finite():
    assert m.finite(1.5) == 1.5 and m.finite(0.0) == 0.0
    assert m.finite(None) is None and m.finite(float("nan")) is None and m.finite(float("-inf")) is None


def test_toml_output_parses_back_to_the_same_data_without_none():
    data = {
        "name": "x", "skip": None, "n": 1, "f": 0.5, "big": 1e300, "flag": True, "items": [1, 2],
        "rewards": [{"name": "a", "params": {}}, {"name": "b", "params": {"a b": 1, "x.y": "q\x7f\"\n", "n": None}}],
        "section": {"k": "v", "none": None, "nested": {"deep": [0.1]}},
    }  # fmt: skip
    parsed = tomllib.loads(dumps(data))
    assert parsed == {
        "name": "x", "n": 1, "f": 0.5, "big": 1e300, "flag": True, "items": [1, 2],
        "rewards": [{"name": "a", "params": {}}, {"name": "b", "params": {"a b": 1, "x.y": "q\x7f\"\n"}}],
        "section": {"k": "v", "nested": {"deep": [0.1]}},
    }  # fmt: skip
    assert dumps({"a": 1}).startswith("a = 1")


def test_list_checkpoints_is_both_sides_view_of_the_folder(tmp_path: Path):
    """The worker resumes and prunes from this list, the Config tab shows it: every checkpoint by
    name or by a complete state, never a save in progress, oldest step first."""
    def state(step: int) -> layout.TrainingState:
        return layout.TrainingState(step=step, epoch=0, step_in_epoch=step, kind="periodic", run_id=1, seed=0,
                                    dataset_size=10, dataset_hash="h", config_digest="d", total_steps=20)

    for name, step in (("checkpoint-8", 8), ("damaged-checkpoint-2", 2), (".tmp-checkpoint-9", 9), ("last-good-4", 4)):
        (tmp_path / name).mkdir()
        layout.write_state(tmp_path / name, state(step))
    for name in ("final", "previous-20250101-000000", "checkpoint-6"):  # no state (final: still being written)
        (tmp_path / name).mkdir()
    (tmp_path / "outputs.db").write_text("")
    found = layout.list_checkpoints(tmp_path)
    assert [(f.path.name, f.kind, f.state is not None) for f in found] == [
        ("damaged-checkpoint-2", None, True), ("last-good-4", "last_good", True), ("checkpoint-6", "periodic", False),
        ("checkpoint-8", "periodic", True), ("final", "final", False),
    ]
    assert layout.list_checkpoints(tmp_path / "nowhere") == []

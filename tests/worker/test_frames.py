"""The worker's output side: plain lines and run.jsonl."""

from __future__ import annotations

import os

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import decode_event
from grpo_tui.worker.frames import Emitter, format_plain


def test_plain_step_line_has_what_a_ci_log_needs():
    step = m.Step(
        step=3, epoch=0, loss=0.01234, reward=0.5, rewards={"accuracy": 0.25, "xml_format": None},
        generation_ms=1500.0, scoring_ms=10.0, training_ms=490.0, generation_tokens_per_s=812.4,
    )  # fmt: skip
    line = format_plain(step, total_steps=60)
    assert line == (
        "step 3/60 | loss 0.0123 | reward 0.500 | accuracy 0.250 xml_format - | 2.00 s/step | 812 tok/s"
    )
    skipped = format_plain(m.Step(step=4, epoch=0, gradients_applied=False, skipped_reason="non-finite loss"))
    assert skipped is not None and skipped.endswith("SKIPPED (non-finite loss)")
    assert format_plain(m.Status(phase="generating")) is None


def test_emitter_writes_frames_or_plain_lines_and_every_event_to_run_jsonl(tmp_path):
    for plain in (False, True):
        read, write = os.pipe()
        emitter = Emitter(write, plain=plain)
        emitter.emit(m.Hello(protocol_version=1, worker_version="x", pid=1))  # before run.jsonl is known
        emitter.open_jsonl(tmp_path / f"{plain}" / "run.jsonl")
        emitter.log("info", "hello there")
        emitter.close()
        sent = os.read(read, 1 << 16).decode().splitlines()
        os.close(read)
        if plain:
            assert sent == ["[info] hello there"]
        else:
            assert [type(decode_event(line)) for line in sent] == [m.Hello, m.Log]
        stored = (tmp_path / f"{plain}" / "run.jsonl").read_text().splitlines()
        assert [type(decode_event(line)) for line in stored] == [m.Hello, m.Log]


def test_a_line_cut_short_by_a_kill_does_not_swallow_the_next_event(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"type":"log","level":"info","message":"ok","time":0}\n{"type":"step","st')
    read, write = os.pipe()
    emitter = Emitter(write)
    emitter.open_jsonl(path)
    emitter.log("info", "after the restart")
    emitter.close()
    os.close(read)
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and decode_event(lines[2]).message == "after the restart"


def test_a_reader_that_went_away_does_not_stop_the_worker(tmp_path):
    read, write = os.pipe()
    os.close(read)
    emitter = Emitter(write)
    emitter.open_jsonl(tmp_path / "run.jsonl")
    emitter.log("info", "nobody listens")  # EPIPE: dropped, no exception
    emitter.log("info", "still fine")
    emitter.close()
    assert len((tmp_path / "run.jsonl").read_text().splitlines()) == 2


class _FullDisk:
    def write(self, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    def close(self) -> None:
        pass


def test_a_full_disk_under_run_jsonl_still_lets_the_error_reach_the_dashboard(tmp_path, capsys):
    read, write = os.pipe()
    emitter = Emitter(write)
    emitter.open_jsonl(tmp_path / "run.jsonl")
    emitter._jsonl = _FullDisk()  # the disk filled up after the file was opened
    emitter.emit(m.Error(message="checkpoint failed: No space left on device", fatal=True))
    emitter.log("info", "exiting")
    emitter.close()
    sent = [decode_event(line) for line in os.read(read, 1 << 16).decode().splitlines()]
    os.close(read)
    assert [type(e) for e in sent] == [m.Error, m.Log]
    assert capsys.readouterr().err.count("run.jsonl: ") == 1  # said once, not per event

"""The one codec for every wire: the control socket's frames and commands decode and fail like the
worker's, and what a reader asks of the layout (a kind's line prefix, an empty text field) is what
the encoder writes."""

import msgspec
import pytest

from grpo_tui.protocol import codec
from grpo_tui.protocol import messages as m

SUPERVISOR_FRAMES = [
    m.Welcome(supervisor_pid=10, worker_pid=11, jsonl_offset=5, frames=3, stderr_lines=2, stderr_tail=1, restarts=1),
    m.WorkerStarted(pid=12),
    m.StderrLine(line="Traceback (most recent call last):"),
    m.WorkerExit(code=1, reason="crashed", restart_in_s=5.0, attempt=1, max_restarts=3),
]
SAMPLE = m.Sample(step=1, index=0, group=0, prompt="p", completion="c", reward=1.0, reward_details={},
                  advantage=0.5, num_tokens=3, finish_reason="stop")


@pytest.mark.parametrize("frame", [*SUPERVISOR_FRAMES, m.Paused(step=2), SAMPLE], ids=lambda f: type(f).__name__)
def test_a_viewer_decodes_the_supervisors_frames_and_the_workers(frame):
    assert codec.decode_viewer_frame(codec.encode(frame)) == frame


@pytest.mark.parametrize("command", [m.Restart(now=True), m.Restart(now=False), m.Stop(), m.SetSampleDisplay(mode="all")],
                         ids=lambda c: type(c).__name__)
def test_the_supervisor_decodes_a_viewers_commands(command):
    assert codec.decode_viewer_command(codec.encode(command)) == command


@pytest.mark.parametrize("decode", [codec.decode_viewer_frame, codec.decode_viewer_command])
@pytest.mark.parametrize("line, summary", [(b"not json", "malformed JSON"), (b'{"type":"nope"}', "invalid message"),
                                           (b"  \n", "empty line")])
def test_every_decoder_raises_protocol_error_only(decode, line, summary):
    with pytest.raises(codec.ProtocolError) as caught:
        decode(line)
    assert caught.value.summary == summary


def test_a_worker_frame_is_not_a_supervisor_command():
    with pytest.raises(codec.ProtocolError):
        codec.decode_viewer_command(codec.encode(m.WorkerStarted(pid=1)))


@pytest.mark.parametrize("message", [*SUPERVISOR_FRAMES, SAMPLE, m.Status(phase="idle"), m.Restart(now=True)],
                         ids=lambda f: type(f).__name__)
def test_line_prefix_is_how_the_encoder_begins_a_kinds_line(message):
    line = codec.encode(message)
    assert line.startswith(codec.line_prefix(type(message)))
    others = [k for k in (m.Sample, m.Status, m.Step, m.Init, m.WorkerStarted) if k is not type(message)]
    assert not any(line.startswith(codec.line_prefix(k)) for k in others)


def test_empty_text_marker_finds_an_empty_message_only():
    assert codec.empty_text_marker("message") in codec.encode(m.Status(phase="idle"))
    assert codec.empty_text_marker("message") not in codec.encode(m.Status(phase="saving", message="checkpoint-5"))


class _StepCounters(msgspec.Struct):
    step: int
    num_tokens: int = 0


def test_decode_fields_reads_only_what_it_names_and_raises_protocol_error():
    line = codec.encode(m.Step(step=7, epoch=1, loss=0.5, reward=1.0, num_tokens=42))
    assert codec.decode_fields(line, _StepCounters) == _StepCounters(step=7, num_tokens=42)
    with pytest.raises(codec.ProtocolError):
        codec.decode_fields(b'{"step":"seven"}', _StepCounters)

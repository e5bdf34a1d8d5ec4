import math

import msgspec
import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import MAX_LINE_BYTES, ProtocolError, decode_command, decode_event, encode
from tests.helpers.every_message import COMMANDS, EVENTS


def test_every_event_type_is_covered():
    assert {type(e) for e in EVENTS} == set(m.EVENT_TYPES)
    assert {type(c) for c in COMMANDS} == set(m.COMMAND_TYPES)


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_event_round_trip(event):
    line = encode(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_event(line) == event


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_command_round_trip(command):
    assert decode_command(encode(command)) == command


def test_tags_are_snake_case():
    assert b'"type":"database_path"' in encode(EVENTS[3])
    assert b'"type":"save_checkpoint"' in encode(m.SaveCheckpoint())
    assert b'"type":"set_sample_display"' in encode(COMMANDS[-1])


def test_nan_and_inf_metrics_survive_as_none():
    step = m.Step(step=1, epoch=0, loss=math.nan, reward=math.inf, kl=-math.inf,
                  rewards={"accuracy": math.nan})
    back = decode_event(encode(step))
    assert back.loss is None and back.reward is None and back.kl is None
    assert back.rewards == {"accuracy": None}


@pytest.mark.parametrize(
    "line, reason",
    [
        (b'{"type": "step", "step": 1', "malformed JSON"),
        (b"not json at all", "malformed JSON"),
        (b'{"type": "teleport", "x": 1}', "invalid message"),
        (b'{"type": "step", "step": "one", "epoch": 0}', "invalid message"),
        (b'{"type": "paused"}', "invalid message"),
        (b"\xff\xfe\x00binary", "malformed JSON"),
        (b"   \n", "empty line"),
        (b"[1, 2, 3]", "invalid message"),
    ],
)
def test_bad_lines_raise_protocol_error(line, reason):
    with pytest.raises(ProtocolError) as info:
        decode_event(line)
    assert info.value.reason.startswith(reason)
    assert len(info.value.line) < 300


def test_protocol_error_truncates_huge_lines():
    line = b'{"type": "log", "level": "info", "message": ' + b'"x' * 100_000
    with pytest.raises(ProtocolError) as info:
        decode_event(line)
    assert len(str(info.value)) < 400


def test_events_are_not_commands():
    with pytest.raises(ProtocolError):
        decode_command(encode(m.Paused(step=1)))
    with pytest.raises(ProtocolError):
        decode_event(encode(m.Pause()))


def test_long_completion_line_round_trips():
    text = "y" * (4 * 1024 * 1024)
    sample = m.Sample(step=1, index=0, group=0, prompt="p", completion=text)
    line = encode(sample)
    assert len(line) < MAX_LINE_BYTES
    assert decode_event(line).completion == text


def test_unicode_and_control_characters_round_trip():
    sample = m.Sample(step=1, index=0, group=0, prompt="\x1b[31m", completion="é\u202e\r\n\x07")
    assert decode_event(encode(sample)) == sample
    assert b"\n" not in encode(sample)[:-1]


def test_messages_are_msgspec_structs_with_type_tag():
    for cls in m.EVENT_TYPES + m.COMMAND_TYPES:
        info = msgspec.inspect.type_info(cls)
        assert info.tag_field == "type"

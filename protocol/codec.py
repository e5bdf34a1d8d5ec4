"""Line codec (docs/architecture.md, "Protocol"): one JSON object per line, one reused encoder and
one decoder per direction, for every line on every wire: the worker's stdout and stdin, run.jsonl
and the control socket.

Decoding never raises anything but ``ProtocolError``, so a reader can catch one type,
show the bad line and go on. A reader that sorts many lines by kind before decoding any asks
``line_prefix`` how a kind's line begins, rather than spelling the encoder's bytes itself.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from grpo_tui.protocol.messages import Command, Event, ViewerCommand, ViewerFrame

# A completion can be long; readers must allow lines far beyond asyncio's 64 KiB default.
MAX_LINE_BYTES = 16 * 1024 * 1024

T = TypeVar("T")


class ProtocolError(ValueError):
    """A line that is not a valid message. ``line`` holds the (truncated) raw text."""

    def __init__(self, reason: str, line: bytes | str) -> None:
        raw = line if isinstance(line, str) else line.decode("utf-8", errors="replace")
        self.reason = reason
        self.line = truncate(raw.rstrip("\r\n"), 200)
        super().__init__(f"{reason}: {self.line!r}")

    @property
    def summary(self) -> str:
        """The reason without msgspec's detail: ``invalid message``, ``malformed JSON``."""
        return self.reason.split(" (")[0]


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more chars)"


_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(Event)
_command_decoder = msgspec.json.Decoder(Command)
_viewer_frame_decoder = msgspec.json.Decoder(ViewerFrame)
_viewer_command_decoder = msgspec.json.Decoder(ViewerCommand)
_partial_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def encode(message: ViewerFrame | ViewerCommand) -> bytes:
    """Encode one message (any of messages.py's, the supervisor's included) as a JSON line, with
    the trailing newline."""
    return _encoder.encode(message) + b"\n"


def _decode(decoder: msgspec.json.Decoder[Any], line: bytes | str) -> Any:
    data = line.strip() if isinstance(line, (bytes, bytearray)) else line.strip().encode()
    if not data:
        raise ProtocolError("empty line", line)
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"invalid message ({exc})", line) from None
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"malformed JSON ({exc})", line) from None


def decode_event(line: bytes | str) -> Event:
    """Decode one worker -> dashboard line. Raises ``ProtocolError``."""
    return _decode(_event_decoder, line)


def decode_command(line: bytes | str) -> Command:
    """Decode one dashboard -> worker line. Raises ``ProtocolError``."""
    return _decode(_command_decoder, line)


def decode_viewer_frame(line: bytes | str) -> ViewerFrame:
    """Decode one control-socket line a viewer reads: a worker frame or the supervisor's own.
    Raises ``ProtocolError``."""
    return _decode(_viewer_frame_decoder, line)


def decode_viewer_command(line: bytes | str) -> ViewerCommand:
    """Decode one control-socket line the supervisor reads: a worker command or ``restart``.
    Raises ``ProtocolError``."""
    return _decode(_viewer_command_decoder, line)


def decode_fields(line: bytes | str, shape: type[T]) -> T:
    """Only the fields ``shape`` (a ``msgspec.Struct`` naming some of a message's fields) declares,
    the rest of the line skipped unparsed: a fast read of a long history. Raises ``ProtocolError``."""
    decoder = _partial_decoders.get(shape)
    if decoder is None:
        decoder = _partial_decoders[shape] = msgspec.json.Decoder(shape)
    return _decode(decoder, line)


def line_prefix(kind: type[msgspec.Struct]) -> bytes:
    """How every encoded line of message type ``kind`` begins (the encoder writes the tag first),
    so a reader can sort lines by kind with ``bytes.startswith`` before decoding any."""
    return b'{"type":"' + str(kind.__struct_config__.tag).encode() + b'"'


def empty_text_marker(field: str) -> bytes:
    """The bytes an encoded line holds when its text ``field`` is empty (``"message":""``)."""
    return b'"' + field.encode() + b'":""'

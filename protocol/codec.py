"""Line codec (docs/architecture.md, "Protocol"): one JSON object per line, one reused encoder/decoder
per direction.

Decoding never raises anything but ``ProtocolError``, so a reader can catch one type,
show the bad line and go on.
"""

from __future__ import annotations

from typing import Any

import msgspec

from grpo_tui.protocol.messages import Command, Event

# A completion can be long; readers must allow lines far beyond asyncio's 64 KiB default.
MAX_LINE_BYTES = 16 * 1024 * 1024


class ProtocolError(ValueError):
    """A line that is not a valid message. ``line`` holds the (truncated) raw text."""

    def __init__(self, reason: str, line: bytes | str) -> None:
        raw = line if isinstance(line, str) else line.decode("utf-8", errors="replace")
        self.reason = reason
        self.line = truncate(raw.rstrip("\r\n"), 200)
        super().__init__(f"{reason}: {self.line!r}")


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more chars)"


_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(Event)
_command_decoder = msgspec.json.Decoder(Command)


def encode(message: Event | Command) -> bytes:
    """Encode one message as a JSON line (with the trailing newline)."""
    return _encoder.encode(message) + b"\n"


def _decode(decoder: msgspec.json.Decoder, line: bytes | str) -> Any:
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

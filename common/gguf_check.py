"""Whether a GGUF file is whole, read from its header alone (no weights, no MLX): ``grpo-tui check``
and the worker's load both say "cut short" for a copy that stopped early, instead of MLX's "tensor
extends past the end of the file" read as an unsupported quantization.

The header (llama.cpp's GGUF v2/v3): magic, version, tensor and key counts, the key/value pairs, then
each tensor's name, shape, type and offset into the data, which starts at the next multiple of
``general.alignment`` (32 by default). Standard library only.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

# bytes per block and elements per block, by GGML type: the types MLX reads (and Q5_0 / Q5_1)
_TYPE_SIZES = {0: (4, 1), 1: (2, 1), 30: (2, 1), 2: (18, 32), 3: (20, 32), 6: (22, 32), 7: (24, 32), 8: (34, 32)}
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class _Unreadable(Exception):
    pass


def _read(handle: BinaryIO, fmt: str) -> int:
    size = struct.calcsize("<" + fmt)
    data = handle.read(size)
    if len(data) < size:
        raise _Unreadable
    return struct.unpack("<" + fmt, data)[0]


def _string(handle: BinaryIO) -> bytes:
    length = _read(handle, "Q")
    if length > 1 << 24:
        raise _Unreadable
    data = handle.read(length)
    if len(data) < length:
        raise _Unreadable
    return data


def _value(handle: BinaryIO, kind: int) -> object:
    if kind == 8:
        return _string(handle)
    if kind == 9:
        item, count = _read(handle, "I"), _read(handle, "Q")
        for _ in range(count):
            _value(handle, item)
        return None
    if kind not in _SCALARS:
        raise _Unreadable
    return _read(handle, _SCALARS[kind])


def gguf_damage(path: Path) -> str | None:
    """Why ``path`` cannot load as a whole GGUF file ("cut short (N bytes where its header says M)"),
    or None when it is whole or its header holds a tensor type this check does not size (MLX then
    says what it thinks)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            if handle.read(4) != b"GGUF":
                return "is not a GGUF file (it does not start with GGUF)"
            version = _read(handle, "I")
            if version < 2:
                return None
            tensors, keys = _read(handle, "Q"), _read(handle, "Q")
            alignment = 32
            for _ in range(keys):
                key, kind = _string(handle), _read(handle, "I")
                value = _value(handle, kind)
                if key == b"general.alignment" and isinstance(value, int) and value > 0:
                    alignment = value
            end = 0
            for _ in range(tensors):
                _string(handle)
                dims = [_read(handle, "Q") for _ in range(_read(handle, "I"))]
                kind, offset = _read(handle, "I"), _read(handle, "Q")
                if kind not in _TYPE_SIZES:
                    return None
                block_bytes, block = _TYPE_SIZES[kind]
                count = 1
                for d in dims:
                    count *= d
                end = max(end, offset + -(-count // block) * block_bytes)
            start = -(-handle.tell() // alignment) * alignment
    except _Unreadable:
        return f"is cut short ({size:,} bytes, inside its header)"
    except OSError as exc:
        return f"does not read ({exc.strerror or exc})"
    if size < start + end:
        return f"is cut short ({size:,} bytes where its header says {start + end:,})"
    return None


def cut_short_sentence(path: Path, why: str) -> str:
    return (f"GGUF file {str(path)!r} {why}; copy or download it again (a copy that was cut short, or a full "
            "disk while it was written)")

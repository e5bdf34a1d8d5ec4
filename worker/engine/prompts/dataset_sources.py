"""Dataset rows from wherever users keep them: JSONL, JSON, CSV, Parquet, a ``save_to_disk`` folder,
or a Hugging Face dataset id (``split``/``subset``), read through the ``datasets`` library.

Rows come back as plain dicts with where they came from (``file:line`` for JSONL, ``file row N``
otherwise), so a bad row's error names the file, the row and the column. Tool schemas (TRL's
``tools`` column, or a ``[data] tools`` file for every row) are read here too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_tui.common import data_check
from grpo_tui.protocol.outcome import Mistake

TOOLS_COLUMN = "tools"
_BUILDERS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json"}


class DatasetSourceError(Mistake, ValueError):
    """A dataset that cannot be read, a fixable mistake; the message names the file (and row and column)."""

    def __init__(self, sentence: str) -> None:
        super().__init__("data", sentence)


@dataclass
class Rows:
    """A dataset's rows, each with its location, and a fingerprint for resume checks."""

    label: str  # the file, folder or id, as errors name it
    rows: list[tuple[str, dict[str, Any]]]  # (where, row)
    fingerprint: str


def is_hub_id(path: str) -> bool:
    return not Path(path).exists() and path.count("/") == 1 and not path.startswith(("/", ".", "~"))


def read(path: str, *, split: str = "train", subset: str | None = None) -> Rows:
    """Every row of the dataset at ``path`` (a file, a ``save_to_disk`` folder or a hub id)."""
    p = Path(path)
    if p.is_file() and p.suffix.lower() == ".jsonl":
        return _jsonl(p)  # our own reader: exact line numbers, blank lines allowed
    if p.is_file() and p.suffix.lower() == ".json":
        return _json(p, split)
    if p.is_file():
        builder = _BUILDERS.get(p.suffix.lower())
        if builder is None:
            raise DatasetSourceError(f"{p}: unknown dataset format {p.suffix!r} (use .jsonl, .json, .csv or .parquet)")
        return _arrow(_load(builder, data_files=str(p), split="train"), str(p), _file_hash(p))
    if p.is_dir():
        return _from_disk(p, split)
    if is_hub_id(path):
        return _hub(path, split, subset)
    raise DatasetSourceError(f"{path}: no such file or folder, and not a Hugging Face dataset id (org/name)")


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _jsonl(path: Path) -> Rows:
    try:
        rows = data_check.jsonl_rows(path)  # the same sentences as grpo-tui check's
    except data_check.RowsError as exc:
        raise DatasetSourceError(str(exc)) from None
    return Rows(str(path), rows, _file_hash(path))


def _json(path: Path, split: str) -> Rows:
    """A JSON array of row objects, or ``{"<split>": [...]}``; JSON lines in a .json file too."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return _jsonl(path) if "\n" in text.strip() else _raise(f"{path}: not valid JSON")
    if isinstance(data, dict) and isinstance(data.get(split), list):
        data = data[split]
    if not isinstance(data, list):
        raise DatasetSourceError(f"{path}: expected a JSON array of rows (or {{{split!r}: [...]}})")
    rows = []
    for i, row in enumerate(data, 1):
        if not isinstance(row, dict):
            raise DatasetSourceError(f"{path} row {i}: a row must be a JSON object, not {type(row).__name__}")
        rows.append((f"{path} row {i}", row))
    return Rows(str(path), rows, _file_hash(path))


def _raise(message: str) -> Any:
    raise DatasetSourceError(message)


def _load(*args: Any, **kwargs: Any) -> Any:
    import datasets

    datasets.disable_progress_bars()  # bars on stderr would become worker log lines
    try:
        return datasets.load_dataset(*args, keep_in_memory=True, **kwargs)
    except Exception as exc:  # noqa: BLE001 — pyarrow, fsspec and hub errors: say which source failed
        where = kwargs.get("data_files") or args[0]
        raise DatasetSourceError(f"{where}: cannot read the dataset ({exc.__class__.__name__}: {_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def _from_disk(folder: Path, split: str) -> Rows:
    import datasets

    datasets.disable_progress_bars()
    try:
        loaded = datasets.load_from_disk(str(folder), keep_in_memory=True)
    except Exception as exc:  # noqa: BLE001
        raise DatasetSourceError(f"{folder}: not a datasets save_to_disk folder ({exc.__class__.__name__}: {_first_line(exc)})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise DatasetSourceError(f"{folder}: no split {split!r} (it has {', '.join(loaded)}); set data.split")
        loaded = loaded[split]
    return _arrow(loaded, str(folder), loaded._fingerprint)


def _hub_unreachable() -> str | None:
    """Why the Hugging Face Hub cannot be reached from here (one quick connection, 3 s at most), or
    None; not asked in offline mode. Without it, an unreachable hub costs half a minute of retries
    (each printed) before the same answer."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return None
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=3).close()
    except OSError as exc:
        return f"{endpoint.scheme}://{endpoint.netloc} cannot be reached ({exc.strerror or exc.__class__.__name__})"
    return None


def _hub(name: str, split: str, subset: str | None) -> Rows:
    import os
    import sys

    if (why := _hub_unreachable()) is not None:
        if "huggingface_hub" in sys.modules or "datasets" in sys.modules:  # its offline switch is read once
            raise DatasetSourceError(f"{name}: the Hugging Face Hub at {why}; connect to the network, or set data.path "
                                     "to a local file (JSONL, JSON, CSV, Parquet or a saved dataset folder)")
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"  # the cache, without retries
        try:
            loaded = _load(name, subset, split=split)
        except DatasetSourceError:
            raise DatasetSourceError(f"{name}: the Hugging Face Hub at {why}, and the Hugging Face cache has no copy "
                                     "of this dataset; connect to the network, or set data.path to a local file "
                                     "(JSONL, JSON, CSV, Parquet or a saved dataset folder)") from None
    else:
        loaded = _load(name, subset, split=split)
    label = f"{name}{f' ({subset})' if subset else ''} split {split}"
    return _arrow(loaded, label, loaded._fingerprint)


def _arrow(dataset: Any, label: str, fingerprint: str) -> Rows:
    # Arrow fills the keys a row lacks with None (structs take the union of keys); drop them so a
    # message or a tool schema reads as it was written.
    return Rows(label, [(f"{label} row {i}", _drop_none(row)) for i, row in enumerate(dataset, 1)], fingerprint)


def _drop_none(value: Any, top: bool = True) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v, False) for k, v in value.items() if top or v is not None}
    if isinstance(value, list):
        return [_drop_none(v, False) for v in value]
    return value


# ---------------------------------------------------------------- tools


def read_tools_file(path: str | Path) -> list[dict[str, Any]]:
    """``[data] tools``: a JSON array of tool schemas (OpenAI / Hugging Face function format)."""
    try:
        tools = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetSourceError(f"{path}: cannot read the tool schemas ({exc.__class__.__name__}: {exc})") from None
    return check_tools(tools, str(path))


def check_tools(tools: Any, where: str) -> list[dict[str, Any]]:
    """A list of tool schema objects (a JSON string of one, as CSV holds it, is parsed)."""
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError:
            raise DatasetSourceError(f"{where}: column {TOOLS_COLUMN!r} is a string but not JSON") from None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise DatasetSourceError(f"{where}: {TOOLS_COLUMN!r} must be a list of tool schema objects")
    return tools


def iter_tools(rows: Rows, default: list[dict[str, Any]] | None) -> Iterator[list[dict[str, Any]] | None]:
    """Each row's tools: its own ``tools`` column, else the ``[data] tools`` file's, else None."""
    for where, row in rows.rows:
        value = row.get(TOOLS_COLUMN)
        yield check_tools(value, where) if value is not None else default

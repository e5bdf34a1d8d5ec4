"""Reading back what the trackers wrote, through each library's own reader or format: TensorBoard's
event accumulator, Trackio's local database (``SQLiteStorage``), W&B's offline ``.wandb`` files
(W&B's own ``Record`` protobufs in the LevelDB log framing W&B writes them in)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator


def tensorboard_scalars(log_dir: Path) -> tuple[Any, dict[str, list[tuple[int, float]]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc, {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def trackio_logs(trackio_dir: Path, project: str, run: str) -> list[dict[str, Any]]:
    """``SQLiteStorage.get_logs`` in a process of its own (Trackio reads TRACKIO_DIR at import)."""
    code = ("import json, sys; from trackio.sqlite_storage import SQLiteStorage as S; "
            "print(json.dumps({'logs': S.get_logs(sys.argv[1], sys.argv[2]), 'config': S.get_run_config(sys.argv[1], sys.argv[2])}))")
    out = subprocess.run([sys.executable, "-c", code, project, run], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRACKIO_DIR": str(trackio_dir)}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def trackio_alerts(trackio_dir: Path, project: str, run: str) -> list[dict[str, Any]]:
    """``SQLiteStorage.get_alerts`` in a process of its own (as ``trackio_logs``)."""
    code = ("import json, sys; from trackio.sqlite_storage import SQLiteStorage as S; "
            "print(json.dumps(S.get_alerts(sys.argv[1], run_name=sys.argv[2]), default=str))")
    out = subprocess.run([sys.executable, "-c", code, project, run], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRACKIO_DIR": str(trackio_dir)}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def wandb_records(path: Path) -> Iterator[Any]:
    """Every record of a ``run-<id>.wandb`` file, as ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, block, pending = 7, 32768, b""  # a 7-byte W&B header, then 32 KiB LevelDB log blocks
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_history(run_file: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the run's config, its history rows) from an offline run file."""
    config: dict[str, Any] = {}
    rows = []
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config.update({u.key: json.loads(u.value_json) for u in record.run.config.update})
        elif kind == "config":
            config.update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return config, rows

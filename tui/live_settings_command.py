"""``grpo-tui set RUN_DIR KEY=VALUE [KEY=VALUE…]``: change a running run's settings from any shell
(docs/steering.md).

It connects to the run's control socket as one more viewer, sends one ``set_setting`` per item and
waits for the worker's answer to each: ``setting_changed`` (applied at the step boundary, printed
with the step it applies from) or ``setting_refused`` (its sentence: what ``--set`` says of a bad
value, or what can change). Standard library and the protocol only: no Textual.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from grpo_tui.common.live_settings import toml_value
from grpo_tui.protocol import codec
from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import ConfigError
from grpo_tui.protocol.config_overrides import apply_override, value_problem
from grpo_tui.protocol.outcome import Exit


MAX_ITEMS = 64  # the worker checks a set's items together (worker/live_settings.py)


def set_live(run_dir: str, items: list[str]) -> int:
    """Send the changes and print each answer: 0 when every one applied, 2 when one was refused or
    no live run answers. It waits for the step boundary (the running step's end), as the change does."""
    folder = Path(run_dir).resolve()
    if len(items) > MAX_ITEMS:
        return _fail(f"{len(items)} items in one set; give at most {MAX_ITEMS} at once")
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:  # the sentence --set gives
            try:
                apply_override({}, item)
            except ConfigError as exc:
                return _fail(exc.detail)
        if (problem := value_problem(value.strip())) is not None:
            return _fail(f"--set {key.strip()}: {problem}; nothing was sent")
    if not c.is_live(c.read_record(folder)):
        return _fail(f"{run_dir}: no live run there (`grpo-tui ls` lists runs and their status); a stopped run "
                     "takes its changes at the resume: grpo-tui run CONFIG --resume latest --set KEY=VALUE")
    asks = {uuid.uuid4().hex[:12]: item for item in items}
    batch = uuid.uuid4().hex[:12]  # the worker applies all the items or none
    try:
        with _connect(folder) as conn:
            for ident, item in asks.items():
                key, _, value = item.partition("=")
                conn.sendall(codec.encode(m.SetSetting(key=key.strip(), value=value.strip(), source="cli", id=ident,
                                                       batch=batch, batch_size=len(asks))))
            return _answers(conn.makefile("rb"), asks)
    except OSError as exc:
        return _fail(f"{run_dir}: the run's control socket does not answer ({exc.strerror or exc})")


@contextlib.contextmanager
def _connect(folder: Path) -> Iterator[socket.socket]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with c.socket_address(c.socket_path(folder)) as address:
            conn.connect(address)
        yield conn
    finally:
        conn.close()


def _answers(stream: BinaryIO, asks: dict[str, str]) -> int:
    """Read the run's frames until every ask is answered (in the order the worker answers)."""
    code = Exit.DONE
    while asks:
        line = stream.readline()
        if not line:
            return _fail(f"the run's control socket closed before it answered {', '.join(asks.values())}")
        try:
            frame = codec.decode_viewer_frame(line)
        except codec.ProtocolError:
            continue
        if isinstance(frame, m.WorkerExit):
            return _fail(f"the worker ended (exit {frame.code}) before it answered {', '.join(asks.values())}")
        if isinstance(frame, m.SettingChanged) and frame.id in asks:
            del asks[frame.id]
            print(f"{frame.key} = {toml_value(frame.new)} from step {frame.step} (was {toml_value(frame.old)})")
        elif isinstance(frame, m.SettingRefused) and frame.id in asks:
            del asks[frame.id]
            print(f"grpo-tui: {frame.message}", file=sys.stderr)
            code = Exit.MISTAKE
    return code


def _fail(message: str, code: int = Exit.MISTAKE) -> int:
    print(f"grpo-tui: {message}", file=sys.stderr)
    return code

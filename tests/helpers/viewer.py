"""A test's viewer on a run's control socket: send commands, wait for frames, as a dashboard would
(without Textual), for the tests that steer a detached run."""

from __future__ import annotations

import queue
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from grpo_tui.protocol import codec
from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m


class Viewer:
    """Connected to ``out``'s socket: every frame after its welcome is decoded into ``frames``."""

    def __init__(self, out: Path, timeout: float = 30.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with c.socket_address(c.socket_path(out)) as address:
                    self.sock.connect(address)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.frames: list[Any] = []
        self._queue: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.sock.makefile("rb"):
            try:
                frame = codec.decode_viewer_frame(line)
            except codec.ProtocolError:
                continue
            self.frames.append(frame)
            self._queue.put(frame)
        self._queue.put(None)

    def send(self, command: m.ViewerCommand) -> None:
        self.sock.sendall(codec.encode(command))

    def wait_for(self, kind: type, predicate: Callable[[Any], bool] = lambda f: True, timeout: float = 120) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                frame = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no {kind.__name__} within {timeout}s") from None
            if frame is None:
                raise AssertionError(f"the socket closed before {kind.__name__}")
            if isinstance(frame, kind) and predicate(frame):
                return frame

    def close(self) -> None:
        self.sock.close()

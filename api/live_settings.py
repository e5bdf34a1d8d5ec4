"""``trainer.set(key, value)`` while ``train()`` runs (docs/steering.md): the Python API's way to a
live change. It writes a ``set_setting`` to the worker's stdin and, from any thread but the one that
follows the worker's frames, waits for the answer: the step the change applies from, or the
refusal's sentence as a ``ValueError``. From a callback (that thread) it returns at once; the answer
still lands in ``log_history``.
"""

from __future__ import annotations

import threading
import uuid
from typing import IO, Any

from grpo_tui.common.live_settings import toml_value
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import encode


class LiveLink:
    """The running worker's stdin and the answers owed to ``set`` calls."""

    def __init__(self) -> None:
        self._stdin: IO[bytes] | None = None
        self._lock = threading.Lock()
        self._waiting: dict[str, tuple[threading.Event, list[m.Event]]] = {}
        self.follower_thread: threading.Thread | None = None  # the thread that reads the frames

    def attach(self, stdin: IO[bytes] | None) -> None:
        """The worker started (its stdin), or ended (None: a waiting ``set`` is let go)."""
        with self._lock:
            self._stdin = stdin
            if stdin is None:
                for done, _ in self._waiting.values():
                    done.set()

    def set(self, key: str, value: Any) -> int | None:
        text = value if isinstance(value, str) else toml_value(value)  # a string is read as --set reads it
        ident = uuid.uuid4().hex[:12]
        done, answer = threading.Event(), []  # type: tuple[threading.Event, list[m.Event]]
        wait = threading.current_thread() is not self.follower_thread
        with self._lock:
            if self._stdin is None:
                raise RuntimeError("trainer.set changes a run while train() runs (without dashboard=True: the "
                                   "dashboard's own keys steer that one); before it, set the value in args")
            if wait:
                self._waiting[ident] = (done, answer)
            try:
                self._stdin.write(encode(m.SetSetting(key=key, value=text, source="api", id=ident)))
                self._stdin.flush()
            except (OSError, ValueError):  # the worker is ending: its stdin is closed
                self._waiting.pop(ident, None)
                raise RuntimeError(f"the run ended before trainer.set({key!r}, ...) reached it") from None
        if not wait:
            return None
        done.wait()
        with self._lock:
            self._waiting.pop(ident, None)
        if not answer:
            raise RuntimeError(f"the run ended before it answered trainer.set({key!r}, ...)")
        if isinstance(answer[0], m.SettingRefused):
            raise ValueError(answer[0].message)
        assert isinstance(answer[0], m.SettingChanged)
        return answer[0].step

    def send(self, command: m.Command) -> bool:
        """Write one command to the running worker (False: it is not running, or its stdin closed)."""
        with self._lock:
            if self._stdin is None:
                return False
            try:
                self._stdin.write(encode(command))
                self._stdin.flush()
            except (OSError, ValueError):
                return False
        return True

    def on_event(self, event: m.SettingChanged | m.SettingRefused) -> None:
        with self._lock:
            waiting = self._waiting.get(event.id)
        if waiting is not None:
            waiting[1].append(event)
            waiting[0].set()


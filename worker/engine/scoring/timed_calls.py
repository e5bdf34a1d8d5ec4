"""User code (reward functions, tools) called with a timeout, on a bounded number of threads.

A Python thread cannot be killed, so a call that outlives its ``timeout_s`` keeps its thread. Three
things keep a function that never returns from growing the worker's threads step after step:

- **Reclaim.** At the timeout an ``Abandoned`` exception is raised inside the call's thread
  (``PyThreadState_SetAsyncExc``). A call running Python code (a polling loop, short sleeps in a
  loop) ends there and its thread is gone. A call blocked inside C (one long ``time.sleep``, a lock,
  a socket read) only sees it when it comes back to Python, so its thread stays.
- **Bound.** A function may have at most ``MAX_HUNG`` such calls still running. Past that it is
  not called at all: the call fails at once with ``StillHung`` ("... is still hung ...") until one
  of its earlier calls returns, which frees its place.
- **Report.** The first time a function reaches the bound, ``take_reports`` hands back one
  sentence for the log (the trainer logs it as a warning); the failing calls' own error texts say
  the same to the model, the store and the Database tab.

Synchronous reward functions are called with ``main_thread=True``: on the process's main thread, as
TRL calls them, so that code which sets signal handlers works (math_verify's and open-r1's
``signal.alarm`` timeouts). Called from the main thread, the call runs there directly; from another
thread (the worker's MLX thread) it is handed to the main thread's asyncio loop (``use_main_loop``)
and waited for. Its timeout is a ``SIGUSR2`` sent to the main thread, whose handler raises
``Abandoned`` in the call: it also ends a ``time.sleep`` or a blocking read there. A call stuck in C
that no signal interrupts keeps the main thread until it returns (TRL's behaviour too).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import inspect
import signal
import sys
import threading
import traceback
from typing import Any, Callable

# Hung calls one function may hold before it is no longer called: an agent step runs up to one
# call per row at once, and each may time out before the bound is known to be reached.
MAX_HUNG = 8


class Abandoned(BaseException):
    """Raised inside a call's thread at its timeout (a BaseException: user code's ``except
    Exception`` does not swallow it)."""


class TimedOut(TimeoutError):
    """The call did not return within its ``timeout_s``; ``stack`` is where its thread was then
    (so a report can name the user's line that hung)."""

    def __init__(self, message: str, stack: traceback.StackSummary) -> None:
        super().__init__(message)
        self.stack = stack


class StillHung(TimeoutError):
    """The function was not called: ``MAX_HUNG`` of its earlier calls have not returned."""


_lock = threading.Lock()
_hung: dict[str, list[threading.Thread]] = {}
_reported: set[str] = set()
_reports: list[str] = []


def hung_threads(name: str | None = None) -> int:
    """Abandoned calls still running (of ``name``, or of every function)."""
    with _lock:
        _prune()
        return sum(len(v) for k, v in _hung.items() if name is None or k == name)


def take_reports() -> list[str]:
    """The sentences about functions that stayed hung, each once, since the last call."""
    with _lock:
        out, _reports[:] = list(_reports), []
        return out


def _prune() -> None:
    for name, threads in list(_hung.items()):
        threads[:] = [t for t in threads if t.is_alive()]
        if not threads:
            del _hung[name]
            _reported.discard(name)  # it came back: a later hang is news again


_main_loop: asyncio.AbstractEventLoop | None = None
TIMEOUT_SIGNAL = signal.SIGUSR2


def use_main_loop(loop: asyncio.AbstractEventLoop | None) -> None:
    """The main thread's running loop, which ``main_thread`` calls from other threads are handed to
    (a loop on another thread is not one: the calls then keep their own threads)."""
    global _main_loop
    if loop is None or threading.current_thread() is threading.main_thread():
        _main_loop = loop


def is_synchronous(fn: Callable[..., Any]) -> bool:
    """Neither a coroutine function nor an object whose ``__call__`` is one."""
    return not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)))


def call(fn: Callable[..., Any], kwargs: dict[str, Any], timeout_s: float, name: str,
         main_thread: bool = False) -> Any:
    """``fn(**kwargs)`` (sync or async) in a thread of its own, at most ``timeout_s`` seconds (0: no
    limit, as mlx-node's reward timeout). Raises ``TimedOut`` (a ``TimeoutError``) past it,
    ``StillHung`` without calling ``fn`` when ``name`` has
    ``MAX_HUNG`` calls still running, and whatever ``fn`` raised. ``main_thread``: a synchronous
    ``fn`` runs on the main thread instead (the module's docstring), when it can be reached."""
    if main_thread and is_synchronous(fn):
        if threading.current_thread() is threading.main_thread():
            return _on_main(fn, kwargs, timeout_s)
        done = _hand_to_main(fn, kwargs, timeout_s)
        if done is not None:
            return done.result()
    with _lock:
        _prune()
        if len(_hung.get(name, ())) >= MAX_HUNG:
            raise StillHung(f"{name} is still hung: {MAX_HUNG} earlier calls have not returned "
                            f"(timeout_s = {timeout_s:g}), so it is not called until one does")
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            result = fn(**kwargs)
            if inspect.isawaitable(result):
                result = asyncio.run(_await(result))
            box["value"] = result
        except Abandoned:
            pass
        except BaseException as exc:  # noqa: BLE001 — reported to the caller below
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"call:{name}", daemon=True)
    thread.start()
    thread.join(timeout_s or None)
    if thread.is_alive():
        frame = sys._current_frames().get(thread.ident or -1)
        stack = traceback.extract_stack(frame) if frame is not None else traceback.StackSummary()
        del frame
        _interrupt(thread)
        thread.join(0.01)  # a call in Python code ends here
        if thread.is_alive():
            with _lock:
                _hung.setdefault(name, []).append(thread)
                if len(_hung[name]) >= MAX_HUNG and name not in _reported:
                    _reported.add(name)
                    _reports.append(f"{name} stays hung: {MAX_HUNG} of its calls have not returned after "
                                    f"timeout_s = {timeout_s:g}; it is not called again until one returns "
                                    "(its calls fail with 'still hung' meanwhile)")
        raise TimedOut(f"timed out after {timeout_s:g}s", stack)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _on_main(fn: Callable[..., Any], kwargs: dict[str, Any], timeout_s: float) -> Any:
    """On the main thread: ``fn(**kwargs)``, with ``TIMEOUT_SIGNAL`` raising ``Abandoned`` in it at
    ``timeout_s``. A loop running on this thread (the worker's, a notebook's) is blocked while the
    call runs, and hidden from it, so that the call may ``asyncio.run()`` its own coroutines, as on
    TRL's main thread."""
    running = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        return _timed_on_main(fn, kwargs, timeout_s)
    finally:
        asyncio.events._set_running_loop(running)


def _timed_on_main(fn: Callable[..., Any], kwargs: dict[str, Any], timeout_s: float) -> Any:
    if not timeout_s:
        return fn(**kwargs)
    guard = threading.Lock()
    state: dict[str, Any] = {"running": True, "expired": False}

    def expire() -> None:
        with guard:
            if state["running"]:
                state["expired"] = True
                signal.pthread_kill(threading.main_thread().ident or 0, TIMEOUT_SIGNAL)

    def on_signal(signum: int, frame: Any) -> None:
        if state["expired"] and state["running"]:
            state["stack"] = traceback.extract_stack(frame)
            raise Abandoned

    previous = signal.signal(TIMEOUT_SIGNAL, on_signal)
    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        return fn(**kwargs)
    except Abandoned:
        raise TimedOut(f"timed out after {timeout_s:g}s", state.get("stack", traceback.StackSummary())) from None
    finally:
        with guard:
            state["running"] = False
        timer.cancel()
        signal.signal(TIMEOUT_SIGNAL, previous)


def _hand_to_main(fn: Callable[..., Any], kwargs: dict[str, Any], timeout_s: float) -> "concurrent.futures.Future[Any] | None":
    """Run the call on the main thread's loop and wait for it; None when that loop is not running
    (the caller then runs it on a thread of its own)."""
    loop = _main_loop
    if loop is None or loop.is_closed() or not loop.is_running():
        return None
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            done.set_result(_on_main(fn, kwargs, timeout_s))
        except BaseException as exc:  # noqa: BLE001 — handed to the waiting thread
            done.set_exception(exc)

    try:
        loop.call_soon_threadsafe(run)
    except RuntimeError:  # the loop closed meanwhile
        return None
    while True:
        try:
            done.exception(timeout=1.0)
            return done
        except concurrent.futures.TimeoutError:
            if not loop.is_running() and done.cancel():  # the loop ended before it ran the call
                return None


def _interrupt(thread: threading.Thread) -> None:
    """Raise ``Abandoned`` in ``thread`` the next time it runs Python code."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(Abandoned))


async def _await(awaitable: Any) -> Any:
    return await awaitable

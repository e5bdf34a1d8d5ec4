"""Following the worker: its frames become ``trainer.state``, ``log_history``, the progress bar, the
callbacks' events (``callbacks.py``) and, with ``log_completions``, a table of completions."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from grpo_tui.common.trl_names import StepWindow, eval_metrics
from grpo_tui.live_settings import LiveLink
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import ProtocolError, decode_event, encode
from grpo_tui.protocol.control import STEP_BARRIER_ENV


class Follower:
    """Turns the worker's frames into ``state``, ``log_history``, the progress bar and the callbacks'
    events. ``barrier``: the worker waits after each step for the answer this sends (resume, stop)."""

    def __init__(self, state: Any, logging_steps: int, live: LiveLink | None = None, handler: Any = None,
                 *, barrier: bool = False, completions: Callable[[int], None] | None = None,
                 first_step: bool = False, progress: bool = True) -> None:
        self.state = state
        self.live = live or LiveLink()
        self.handler = handler  # callbacks.CallbackHandler, or None
        self.barrier = barrier
        self.completions = completions  # prints a step's completions (log_completions)
        self.window = StepWindow(logging_steps, first=first_step)  # logging_first_step: an entry for step 1 too
        self.progress = progress  # disable_tqdm: no bar; warnings and evaluations still print
        self.steps_per_epoch = 0
        self.error: str | None = None
        self.callback_error: BaseException | None = None  # raised by train() once the worker has stopped
        self.complete: m.Complete | None = None
        self.stop_requested = False  # a callback's control.should_training_stop: the run's end, not a failure
        self.database: m.DatabasePath | None = None
        self.losses: list[float] = []
        self.bar: Any = None
        self.show = False
        self.replaying = False  # earlier sessions' frames (a resume): state only, no callbacks
        self._greedy_eval_step: int | None = None  # the step of the last eval frame when it was greedy
        self._control: Any = None  # with the barrier: the callbacks' control of the step, till its barrier

    def feed(self, line: bytes) -> None:
        try:
            event = decode_event(line)
        except ProtocolError:
            return
        self.on_event(event)

    def on_event(self, event: m.Event) -> None:
        state = self.state
        if isinstance(event, m.Init):
            self.steps_per_epoch = max(event.steps_per_epoch, 1)
            state.max_steps, state.num_train_epochs = event.total_steps, event.num_epochs
            self.window.total = event.total_steps
            if self.show and self.progress:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=event.total_steps, initial=state.global_step, desc="GRPO", unit="step")
            self._event("on_train_begin")
        elif isinstance(event, m.ResumeState):
            state.global_step = event.step
            state.log_history[:] = [e for e in state.log_history if e.get("step", 0) <= event.step]
            self.window.resume(event.step, event.aggregates.total_tokens)  # num_tokens goes on from there
            if self.bar is not None:
                self.bar.n = event.step
                self.bar.refresh()
        elif isinstance(event, m.DatabasePath):
            self.database = event
        elif isinstance(event, m.EpochStart):
            self._event("on_epoch_begin")
        elif isinstance(event, m.EpochEnd):
            self._event("on_epoch_end")
        elif isinstance(event, m.Step):
            self._on_step(event)
        elif isinstance(event, m.SettingChanged):
            state.log_history.append({"live_change": event.key, "old": event.old, "new": event.new,
                                      "source": event.source, "step": event.step})
            self.live.on_event(event)
        elif isinstance(event, m.SettingRefused):
            self._say(f"[warning] not changed: {event.message}")
            self.live.on_event(event)
        elif isinstance(event, m.Eval):
            self._on_eval(event)
        elif isinstance(event, m.StepBarrier):
            control, self._control = self._control, None
            if control is not None and not self.replaying:
                self._answer(control, event.step)
        elif isinstance(event, m.Checkpoint):
            state.last_checkpoint = event.path
            self._event("on_save")
        elif isinstance(event, m.Log) and event.level in ("warning", "error"):
            self._say(f"[{event.level}] {event.message}")
        elif isinstance(event, m.Error):
            if event.fatal:
                self.error = event.message
            self._say(f"[{'fatal' if event.fatal else 'error'}] {event.message}")
        elif isinstance(event, m.Complete):
            self.complete = event

    def _on_step(self, event: m.Step) -> None:
        state = self.state
        state.global_step, state.epoch = event.step, event.step / (self.steps_per_epoch or 1)
        if event.loss is not None:
            self.losses.append(event.loss)
        entry = self.window.add(event)
        if entry is not None:
            entry = {**entry, "epoch": round(state.epoch, 4), "step": event.step}
            state.log_history.append(entry)
        if self.bar is not None:
            self.bar.set_postfix(reward=_short(event.reward), loss=_short(event.loss), refresh=False)
            self.bar.update(event.step - self.bar.n)
        if self.replaying:
            return
        control = self._event("on_step_end")
        if entry is not None:
            control = self._event("on_log", logs=entry)
            if self.completions is not None:
                self.completions(event.step)
        if control is None:
            return
        if self.barrier:
            self._control = control  # answered at the step's barrier, after its evaluations' on_evaluate
        else:
            self._answer(control, event.step)

    def _answer(self, control: Any, step: int) -> None:
        """The callbacks' verdict on ``step`` (on_step_end's, and on_evaluate's), sent to the worker."""
        if control.should_training_stop or self.callback_error is not None:
            # once: a second stop (the flag stays set after on_evaluate's) is refused with an error line
            self.stop_requested = self.stop_requested or self.live.send(m.Stop())
        else:
            if control.should_save:
                self.live.send(m.SaveCheckpoint())
            if self.barrier:
                self.live.send(m.Resume())
            if step < self.state.max_steps:
                self._event("on_step_begin")
        control._new_step()

    def _on_eval(self, event: m.Eval) -> None:
        # eval.also_sampled: the sampled pass follows the greedy one of its step; TRL's names stay the greedy's
        second = not event.greedy and self._greedy_eval_step == event.step
        self._greedy_eval_step = event.step if event.greedy else None
        prefix = "eval_sampled_" if second else "eval_"
        entry = {f"{prefix}{k}": v for k, v in eval_metrics(event).items()}
        entry = {**entry, "epoch": round(event.step / (self.steps_per_epoch or 1), 4), "step": event.step}
        self.state.log_history.append(entry)
        self._say(f"eval at step {event.step}: reward {_short(event.reward)}"
                  + (f", accuracy {_short(event.accuracy)}" if event.accuracy is not None else ""))
        control = self._event("on_evaluate", metrics=entry)
        waiting = self.barrier and self._control is not None  # the step's barrier says it (step 0's has none)
        if control is not None and control.should_training_stop and not self.stop_requested and not waiting:
            self.stop_requested = self.live.send(m.Stop())

    def _event(self, name: str, **kwargs: Any) -> Any:
        """One callback event (None without callbacks); a callback's exception stops the run."""
        if self.handler is None or self.replaying or self.callback_error is not None:
            return None
        try:
            return self.handler.call(name, **kwargs)
        except Exception as exc:  # noqa: BLE001 — raised again by train() after the stop
            self.callback_error = exc
            self.live.send(m.Stop())
            return None

    def _say(self, text: str) -> None:
        if not self.show:
            return
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr)

    def summary(self) -> dict[str, float]:
        done = self.complete
        metrics: dict[str, float] = {}
        if done is not None:
            metrics["train_runtime"] = round(done.seconds, 4)
            metrics["train_steps_per_second"] = round(done.total_steps / done.seconds, 3) if done.seconds else 0.0
        if self.losses:
            metrics["train_loss"] = sum(self.losses) / len(self.losses)
        if metrics:
            self.state.log_history.append({**metrics, "epoch": round(self.state.epoch, 4), "step": self.state.global_step})
        return metrics

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def replay(state: Any, logging_steps: int, log_file: Path, end: int, *, first_step: bool = False) -> None:
    """The frames of the earlier sessions of a run (``run.jsonl`` up to ``end``) into ``state``:
    ``log_history`` goes on across a resume in a new process, as TRL's checkpoints keep it."""
    follower = Follower(state, logging_steps, first_step=first_step)
    follower.replaying = True
    with open(log_file, "rb") as f:
        for line in f.read(end).splitlines():
            follower.feed(line)


def _short(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def worker_env(barrier: bool = False) -> dict[str, str]:
    """The worker imports what the caller could: pickled functions that live in the caller's own
    modules (not in ``__main__``) are pickled by reference and imported again there."""
    env = dict(os.environ)
    paths = [p or os.getcwd() for p in sys.path if not p or os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths + env.get("PYTHONPATH", "").split(os.pathsep)))
    if barrier:
        env[STEP_BARRIER_ENV] = "1"
    else:
        env.pop(STEP_BARRIER_ENV, None)
    return env


def run_worker(config_path: Path, follower: Follower, live: LiveLink) -> int:
    follower.show = True
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_tui.worker", str(config_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=worker_env(follower.barrier),
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    threading.Thread(target=_copy_stderr, args=(proc.stderr,), daemon=True).start()
    live.follower_thread = threading.current_thread()
    live.attach(proc.stdin)
    try:
        return _follow(proc, follower)
    finally:
        live.attach(None)


def _follow(proc: subprocess.Popen[bytes], follower: Follower) -> int:
    assert proc.stdin is not None and proc.stdout is not None
    interrupted = False
    while True:
        try:
            for line in proc.stdout:
                follower.feed(line)
            break
        except KeyboardInterrupt:
            if interrupted:  # the second Ctrl-C: do not wait for the checkpoint
                proc.kill()
                proc.wait()
                follower.close()
                raise
            interrupted = True
            follower._say("stopping after a checkpoint (Ctrl-C again to kill the worker)")
            try:
                proc.stdin.write(encode(m.Stop()))
                proc.stdin.flush()
            except OSError:
                pass
    code = proc.wait()
    proc.stdin.close()
    if interrupted:
        follower.close()
        raise KeyboardInterrupt
    return code


def _copy_stderr(stream: IO[bytes]) -> None:
    """The worker's stderr (tracebacks, what rewards print) into this process's, which a notebook shows."""
    for line in stream:
        sys.stderr.write(line.decode("utf-8", errors="replace"))
        sys.stderr.flush()


__all__ = ["Follower", "replay", "run_worker", "worker_env"]

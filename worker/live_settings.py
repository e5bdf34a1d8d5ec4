"""Live changes in the worker (docs/steering.md): a ``set_setting`` is checked when it arrives
(``common/live_settings.check``, the code ``--set`` runs, then the loaded model's own limits) and
refused at once, or queued; the loop applies the queue at the next step boundary, so the change
holds from the next step on, and records it (frame, store, log; the loop tells the trackers).

A resume goes on with the changes: those a checkpoint kept apply before the model loads, and those
the store recorded after it (a kill) apply again at their own step, unless a ``--set`` of the
resume names the key.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from grpo_tui.common.live_settings import canonical_key, carried, check, resume_note, set_value, toml_value, value_at
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config, ConfigError, validate
from grpo_tui.protocol.layout import TrainingState
from grpo_tui.worker.context import RunContext


class LiveChanges:
    """One run's live changes: the queue, the replays after a resume."""

    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.pending: list[tuple[m.SetSetting, str, Any]] = []  # checked: (command, key, new value)
        self.batches: dict[str, list[m.SetSetting]] = {}  # a `grpo-tui set` of several items, until all came
        self.overridden: list[m.SettingChanged] = []  # a resume's --set over a live change: recorded as a change
        self.replay: list[m.SettingChanged] = []  # recorded after the resumed checkpoint: applied again at their step

    def request(self, command: m.SetSetting) -> list[m.Event]:
        """Check a change as it arrives (a batch's items once all came): the refusals now, or log
        lines saying when they apply. A batch with any refused item changes nothing."""
        commands = [command]
        if command.batch and command.batch_size > 1:
            waiting = self.batches.setdefault(command.batch, [])
            waiting.append(command)
            if len(waiting) < min(command.batch_size, 64):
                return []
            commands = self.batches.pop(command.batch)
        run = self.run
        view = self._view(fresh=True)  # a copy: the items are set in it as they are checked
        checked: list[tuple[m.SetSetting, str, Any]] = []
        refused: dict[int, str] = {}
        for i, cmd in enumerate(commands):
            try:
                key, value = self._check(view, cmd)
            except ConfigError as exc:
                refused[i] = exc.sentence
                continue
            set_value(view, key, value)  # the batch's next item is checked over this one
            checked.append((cmd, key, value))
        if refused:
            first = commands[min(refused)]
            why = (f"not applied: {first.key}={first.value} was refused, and a set changes all its items or none; "
                   "nothing in the run changed")
            return [m.SettingRefused(key=cmd.key, value=cmd.value, message=refused.get(i, why), source=cmd.source,
                                     id=cmd.id) for i, cmd in enumerate(commands)]
        self.pending.extend(checked)
        when = f"after step {run.step + 1} finishes" if run.control.stepping else "at the next step boundary"
        return [m.Log(level="info", message=f"{key} = {toml_value(value)}: applies {when}", time=time.time())
                for _, key, value in checked]

    def _check(self, view: Config, command: m.SetSetting) -> tuple[str, Any]:
        """(key, value) of one change over ``view``; a ``ConfigError`` with its sentence."""
        run = self.run
        try:
            key, value = check(view, f"{command.key}={command.value}", run.config_path)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 — whatever the text was, the asker gets an answer
            raise ConfigError(command.key or "--set", f"--set {command.key}: the value does not read as a setting "
                              f"({type(exc).__name__}); give a number, a word, or a short list", run.config_path) from None
        if key == "training.max_steps" and 0 < value < run.step:
            raise ConfigError(key, f"{value} is before the step the run is at ({run.step}); at least "
                                   f"{run.step} (which ends the run now)", run.config_path)
        if run.loaded is not None and (why := run.loaded.live_problem(key, value)) is not None:
            raise ConfigError(key, why, run.config_path)
        return key, value

    def _view(self, fresh: bool = False) -> Config:
        """The effective config with the queued changes in it (what the next change is checked
        against); ``fresh``: always a copy (a batch sets its items in it as it checks them)."""
        if not self.pending and not fresh:
            return self.run.config
        view = validate(self.run.config.to_dict(), self.run.config_path)
        for _, key, value in self.pending:
            set_value(view, key, value)
        return view

    async def apply_due(self) -> list[m.SettingChanged]:
        """At a step boundary (rank 0): the queued changes and the replays due, applied and recorded."""
        run = self.run
        step = run.step + 1
        due = [c for c in self.replay if c.step <= step]
        self.replay = [c for c in self.replay if c.step > step]
        wanted = [(c.key, c.new, c.source, "") for c in due]
        wanted += [(key, value, cmd.source, cmd.id) for cmd, key, value in self.pending]
        self.pending = []
        if not wanted:
            return []
        changes = [self._set(step, key, value, source, ident) for key, value, source, ident in wanted]
        await self._follow([c.key for c in changes])
        total = run.trainer.total_steps
        for change in changes:
            if change.key == "training.max_steps":
                change.total_steps = total
            run.live_changes.append(change)
            run.log("info", f"live change from step {step}: {change.key} {toml_value(change.old)} -> "
                            f"{toml_value(change.new)} ({change.source})")
            run.emit(change)
            if run.store is not None:
                await run.store.write_change(run.run_id, change)
        if run.store is not None and any(c.key == "training.max_steps" for c in changes):
            await run.store.update_run(run.run_id, total_steps=total)
        return changes

    def _set(self, step: int, key: str, value: Any, source: m.SettingSource, ident: str) -> m.SettingChanged:
        old = value_at(self.run.config, key)
        set_value(self.run.config, key, value)
        return m.SettingChanged(step=step, key=key, old=old, new=value, source=source, time=time.time(), id=ident)

    async def _follow(self, keys: list[str]) -> None:
        run = self.run
        await run.mlx(run.trainer.settings_changed, keys)
        run.emitter.total_steps = run.trainer.total_steps

    # ------------------------------------------------------------ several ranks

    def encode(self, changes: list[m.SettingChanged]) -> bytes:
        return msgspec.json.encode(changes)

    async def follow_leader(self, payload: bytes) -> None:
        """A rank > 0: rank 0's changes of this boundary, applied here too."""
        changes = msgspec.json.decode(payload, type=list[m.SettingChanged])
        for change in changes:
            set_value(self.run.config, change.key, change.new)
        await self._follow([c.key for c in changes])

    # ------------------------------------------------------------ resume

    def resume(self, state: TrainingState, later: list[m.SettingChanged]) -> list[str]:
        """Go on with the checkpoint's changes (now, before the model loads) and the store's ``later``
        ones (at their step); a key a ``--set`` names keeps the ``--set``. The log lines to say."""
        run = self.run
        kept = carried(state.live_changes, run.overrides)
        said = [f"--set {c.key} wins over its live change ({toml_value(c.new)} since step {c.step})"
                for c in state.live_changes if c not in kept]
        latest = {c.key: c.new for c in [*state.live_changes, *later]}  # the value each key trained with last
        self.overridden = [
            m.SettingChanged(step=state.step + 1, key=key, old=old, new=value_at(run.config, key), source="cli",
                             time=time.time())
            for key, old in latest.items()
            if key in {canonical_key(item.partition("=")[0]) for item in run.overrides} and value_at(run.config, key) != old]
        if note := resume_note(kept, run.config):
            said.append(note)
        for change in kept:
            set_value(run.config, change.key, change.new)
            run.live_changes.append(change)
        self.replay = carried(later, run.overrides)
        return said

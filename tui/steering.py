"""The dashboard's side of live changes (docs/steering.md): ``t`` opens the live settings and sends
what was edited, the Doctor tab's ``a`` a finding's suggested change (source "doctor"); each
``setting_changed`` is said to this viewer (every viewer gets the frame), a ``setting_refused`` only
to the viewer that asked. The state folds both (tui/state.py)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from grpo_tui.common.live_settings import toml_value
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.tui.inert_text import clean
from grpo_tui.tui.screens.settings import SettingsScreen
from grpo_tui.tui.state import RunState


class Steering:
    """``send``: the run link's; ``push`` and ``notify``: the app's."""

    def __init__(self, state: RunState, config: Config, send: Callable[[m.Command], Awaitable[Any]],
                 push: Callable[..., Any], notify: Callable[..., Any]) -> None:
        self.state, self.config, self.send, self.push, self.notify = state, config, send, push, notify
        self.asked: set[str] = set()  # the ids of the changes this viewer sent
        self.opened_at = time.time()  # a change from before (the run's history) is not news

    def open(self) -> None:
        self.push(SettingsScreen(self.state.live_settings(self.config)), self.apply)

    async def apply(self, items: list[str] | None, source: m.SettingSource = "dashboard") -> None:
        for item in items or []:
            key, _, value = item.partition("=")
            ident = f"{id(self):x}-{len(self.asked)}"
            self.asked.add(ident)
            await self.send(m.SetSetting(key=key, value=value, source=source, id=ident))

    async def suggest(self, finding: m.Finding) -> None:
        """The Doctor tab's ``a``: the finding's suggested change, recorded as the doctor's."""
        if finding.suggestion is None:
            self.notify(f"the {finding.name} finding suggests no live change", severity="warning", markup=False)
            return
        if self.state.status not in ("running", "paused"):
            self.notify("no live run to change", severity="warning", markup=False)
            return
        self.notify(f"asked: {finding.suggestion} (the doctor's {finding.name} finding), from the next step", markup=False)
        await self.apply([finding.suggestion], source="doctor")

    def tell(self, event: m.Event) -> None:
        if isinstance(event, m.SettingChanged) and event.time >= self.opened_at:
            self.notify(f"{event.key} = {toml_value(event.new)} from step {event.step} ({event.source})", markup=False)
        elif isinstance(event, m.SettingRefused) and event.id in self.asked:
            self.notify(clean(event.message, single_line=True), severity="error", timeout=15, markup=False)

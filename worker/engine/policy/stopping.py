"""Per-row early stops during a rollout: stop strings and a completion that repeats itself.

Both generation paths (the compiled loop and mlx-lm's ``BatchGenerator``) feed each sampled token
to ``RowStops.push`` and end the row when it answers a reason. The rules:

- **stop strings** (``generation.stop``, TRL / vLLM ``stop``): a row ends as soon as its decoded
  completion contains one of the strings. As in vLLM's default (``include_stop_str_in_output =
  False``) the *text* is cut before the stop string; the *token ids* keep every sampled token up to
  and including the one that completed it, because that is what the policy chose (like the EOS
  token, it is trained on). Finish reason ``"stop"``.
- **repetition** (``generation.repetition_stop_ngram`` = n, ``repetition_stop_count`` = k): a row
  ends when its last n·k tokens are one n-gram repeated k times in a row. Finish reason
  ``"repetition"``. Tracked in O(1) per token: the length of the current run of positions t with
  ``tokens[t] == tokens[t - n]``; k copies of an n-gram are exactly a run of n·(k-1) such positions.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """``text`` cut before the earliest stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class RepeatWatch:
    """Whether a token stream now ends in ``count`` copies of one ``n``-gram."""

    def __init__(self, n: int, count: int) -> None:
        self.n, self.count = n, count
        self.tokens: list[int] = []
        self.run = 0  # consecutive latest positions t with tokens[t] == tokens[t - n]

    def push(self, token: int) -> bool:
        t = len(self.tokens)
        self.tokens.append(token)
        if t >= self.n and self.tokens[t - self.n] == token:
            self.run += 1
        else:
            self.run = 0
        return self.count >= 2 and self.run >= self.n * (self.count - 1)


class StopWatch:
    """Whether a token stream's decoded text now contains a stop string.

    Decodes only a tail window wide enough for the longest stop string (a token is at least one
    character, plus slack for multi-byte characters split across tokens), so a step costs the same
    however long the completion already is."""

    def __init__(self, decode: Callable[[list[int]], str], stops: Sequence[str]) -> None:
        self.decode = decode
        self.stops = [s for s in stops if s]
        self.window = max((len(s) for s in self.stops), default=0) + 4
        self.tokens: list[int] = []

    def push(self, token: int) -> bool:
        self.tokens.append(token)
        tail = self.decode(self.tokens[-self.window :])
        return any(s in tail for s in self.stops)


class RowStops:
    """The early-stop rules for every row of one rollout. ``push`` answers ``"stop"`` (a stop
    string), ``"repetition"`` or ``None`` (keep going); a row is not watched after it answers."""

    def __init__(self, rows: int, tokenizer: Any, stops: Sequence[str] = (), ngram: int = 0, count: int = 0) -> None:
        self.stops = [s for s in stops if s]
        self.repeat = ngram > 0 and count >= 2
        self._strings = [StopWatch(tokenizer.decode, self.stops) for _ in range(rows)] if self.stops else None
        self._repeats = [RepeatWatch(ngram, count) for _ in range(rows)] if self.repeat else None
        self.reasons: list[str | None] = [None] * rows  # why each row ended early, if it did

    @property
    def active(self) -> bool:
        return bool(self._strings or self._repeats)

    def push(self, row: int, token: int) -> str | None:
        reason = None
        if self._strings is not None and self._strings[row].push(token):
            reason = "stop"
        elif self._repeats is not None and self._repeats[row].push(token):
            reason = "repetition"
        self.reasons[row] = reason
        return reason


def make_row_stops(rows: int, tokenizer: Any, gen: Any) -> RowStops | None:
    """The rules of a ``GenerationConfig`` for ``rows`` rows, or None when none is on."""
    stops = RowStops(
        rows, tokenizer, getattr(gen, "stop", ()) or (),
        getattr(gen, "repetition_stop_ngram", 0), getattr(gen, "repetition_stop_count", 0),
    )  # fmt: skip
    return stops if stops.active else None

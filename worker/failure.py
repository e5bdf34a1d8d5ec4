"""A run that ends badly (docs/architecture.md, "Processes"): a fixable mistake (one sentence, its
traceback in the run log only, exit 2) or a crash (the exception's type and message, exit 1);
either way said once, with an emergency checkpoint when the weights are worth keeping."""

from __future__ import annotations

import sys
import traceback

from grpo_tui.common import disk_space
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.outcome import Exit, Mistake
from grpo_tui.worker import ranks
from grpo_tui.worker.checkpoint_policy import CheckpointPolicy
from grpo_tui.worker.context import RunContext
from grpo_tui.worker.trainer_contract import RankLost, SaidFailure


async def end_badly(run: RunContext, checkpoints: CheckpointPolicy, exc: Exception, *, mistake: bool, leader: bool,
                    distributed: bool) -> int:
    """Say ``exc`` (inside its ``except``: the traceback is the current one) and return the exit code."""
    trace = traceback.format_exc()
    emitter = run.emitter
    where = str(emitter.jsonl_path) if emitter.jsonl_path is not None else None
    if isinstance(exc, Mistake):
        message, code, kind = exc.sentence, Exit.MISTAKE, exc.kind
        shown = m.Error(message=message, fatal=True, exit_code=code, kind=kind, log_path=where)
        emitter.emit(shown, mirror=m.Error(message=message, fatal=True, traceback=trace, exit_code=code, kind=kind))
    else:
        # A reward or a tool that failed says so in a sentence naming it; the rest are bugs.
        message = str(exc) if isinstance(exc, SaidFailure) else f"{type(exc).__name__}: {exc}"
        code = Exit.CRASH
        run.emit(m.Error(message=message, fatal=True, traceback=trace, exit_code=code, log_path=where))
    if distributed and mistake:  # the launcher says it once for all ranks (ranks.launch_and_wait)
        print(ranks.mistake_line(message), file=sys.stderr, flush=True)
    elif not leader:  # its frames go nowhere (main.py); say it once where the launcher shows it
        print(f"rank {ranks.rank()}: {message}", file=sys.stderr, flush=True)
    if run.store is not None:
        run.store.queue_log(run.step, "error", message)
    try:
        # A step that failed before its update left the weights untouched: worth keeping.
        # So did a lost rank (every collective comes before the one update of a single pass).
        lost = isinstance(exc, RankLost) and run.config.grpo.num_iterations == 1
        untouched = run.phase in ("generating", "scoring") or lost
        full = isinstance(exc, disk_space.DiskFull)  # another checkpoint would not fit either
        if run.loaded is not None and untouched and not full and checkpoints.steps_since():
            await checkpoints.save("emergency", reason="crash")
        if run.store is not None:
            await run.store.finish_run(run.run_id, "stopped" if mistake else "crashed")
    except Exception as inner:  # noqa: BLE001 - already ending; say it, keep the first error
        emitter.log("error", f"while handling the {'mistake' if mistake else 'crash'}: {type(inner).__name__}: {inner}")
    return code

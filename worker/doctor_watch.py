"""The run doctor in the worker (docs/doctor.md): after every step its findings go out as ``finding``
frames (run.jsonl, the dashboard, ``--plain``), into the store and to the trackers, whether or not a
dashboard watches; ``doctor.stop_on`` ends the run on one that severe. The rules are
``common/doctor.py``'s, which ``grpo-tui doctor`` runs over a store."""

from __future__ import annotations

import os

from grpo_tui.common.doctor import SEVERITIES, Doctor, GenFacts, StepFacts
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.outcome import Exit
from grpo_tui.worker.context import RunContext
from grpo_tui.worker.trainer_contract import StepOutput
from grpo_tui.worker.trackers import Trackers


def step_facts(output: StepOutput, evals: list[tuple[int, float]] | None = None) -> StepFacts:
    """What the doctor reads of a step the worker just trained (with the evaluations since the last)."""
    generations = [GenFacts(g.prompt_index, g.group_index, g.reward, g.num_tokens, g.finish_reason, g.completion,
                            dict(g.reward_details)) for g in output.generations]
    return StepFacts(output.metrics.step, output.metrics, generations, list(evals or []), load=_load())


def _load() -> float | None:
    """The machine's 1-minute load average (the slowdown rule tells other work from the run's own)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


class DoctorWatch:
    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.doctor = Doctor(run.config) if run.config.doctor.enabled else None
        self.evals: list[tuple[int, float]] = []  # since the last step fed: (the step measured, accuracy)
        self.stopped_because: str | None = None

    def evaluated(self, result: m.Eval) -> None:
        """An evaluation (at the start, or after a step): the next facts fed carry it, at its own step."""
        greedy = self.run.config.eval is None or self.run.config.eval.greedy  # the pass the run is judged by
        if result.accuracy is not None and result.greedy == greedy:
            self.evals.append((result.step, result.accuracy))

    async def after_step(self, output: StepOutput, trackers: Trackers | None = None) -> bool:
        """Feed the step; each finding to the trackers too (alerts, docs/trackers.md); True when
        ``doctor.stop_on`` ends the run here."""
        if self.doctor is None:
            return False
        facts = step_facts(output, self.evals)
        self.evals = []
        run = self.run
        stop_at = run.config.doctor.stop_on
        stop: m.Finding | None = None
        for finding in self.doctor.feed(facts):
            run.emit(finding)
            if run.store is not None:
                await run.store.write_finding(run.run_id, finding)
            if trackers is not None:
                trackers.finding(finding)
            if not finding.cleared and stop_at != "off" and SEVERITIES.index(finding.severity) >= SEVERITIES.index(stop_at):
                stop = stop or finding
        if stop is None:
            return False
        self.stopped_because = (f"the run doctor stopped the run at step {stop.step} (doctor.stop_on = \"{stop_at}\"): "
                                f"{stop.message}")
        run.emit(m.Error(message=self.stopped_because, fatal=True, exit_code=Exit.DOCTOR,
                         log_path=str(run.emitter.jsonl_path)))
        run.control.stop("doctor")
        return True

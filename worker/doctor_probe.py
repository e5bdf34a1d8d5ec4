"""``[doctor] probe = true`` (docs/doctor.md, "Before the run"): before a fresh run's model loads, the
worker runs ``check --probe``'s measurement in a child process (``worker/engine/probe.py``: the model,
N prompts × group_size, a timed step, then it exits and its memory is the machine's again) and says
what it found as the finding ``probe`` (step 0): in ``run.jsonl``, the store, ``--plain`` and the
dashboard's Doctor tab before step 1. A probe that cannot run is a warning line; the run goes on."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile

from grpo_tui.common.blas import child_env
from grpo_tui.common.doctor import probe_finding
from grpo_tui.common.tomlout import dumps
from grpo_tui.worker.context import RunContext

PROBE_TIMEOUT_S = 1800.0


def _machine_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return 0.0


async def probe_before_step_1(run: RunContext) -> None:
    config = run.config
    count = config.doctor.probe_prompts
    run.log("info", f"the run doctor's probe: {count} prompts × {config.grpo.group_size} completions and a timed "
                    "step, before the model loads for training ([doctor] probe)")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "config.toml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(dumps(config.to_dict()))  # the effective config: overrides and resolved paths
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "grpo_tui.worker.engine.probe", path, str(count),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=child_env(config.runtime.blas))
        try:
            out, err = await asyncio.wait_for(child.communicate(), PROBE_TIMEOUT_S)
        except asyncio.TimeoutError:
            child.kill()
            await child.wait()
            run.log("warning", f"the probe did not finish in {PROBE_TIMEOUT_S:.0f} s; the run goes on without it")
            return
    lines = [line for line in out.decode(errors="replace").splitlines() if line.strip()]
    if child.returncode != 0 or not lines:
        said = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        why = said[-1] if said else f"exit {child.returncode}"
        run.log("warning", f"the probe could not run ({why}); the run goes on without it")
        return
    finding = probe_finding(json.loads(lines[-1]), config.training.memory_limit_gb, _machine_gb())
    run.emit(finding)
    if run.store is not None:
        await run.store.write_finding(run.run_id, finding)

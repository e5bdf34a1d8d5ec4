"""A scripted stand-in for ``python -m grpo_tui.worker``: speaks the real protocol, trains nothing.

    python tests/helpers/fake_worker.py [--steps N] [--fps F] [--crash-at STEP] ...

Frames go to stdout, log lines to stderr, commands are read from stdin (pause / resume / stop /
save_checkpoint / set_sample_display). With ``--resume latest`` (what the dashboard adds on a
restart) it resumes after the last checkpoint it wrote and sends ``resume_state``.
Everything is deterministic: values are functions of the step number.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import sys
import threading
import time
from pathlib import Path

from grpo_tui.protocol import codec
from grpo_tui.protocol import messages as m


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("config", nargs="?", default="")
    p.add_argument("--steps", type=int, default=12, help="total steps")
    p.add_argument("--fps", type=float, default=0.0, help="frames per second (0 = as fast as possible)")
    p.add_argument("--samples", type=int, default=4, help="sample frames per step")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--completion-chars", type=int, default=60)
    p.add_argument("--protocol-version", type=int, default=m.PROTOCOL_VERSION)
    p.add_argument("--crash-at", type=int, default=0, help="exit 7 after this step (first run only)")
    p.add_argument("--mistake-at", type=int, default=0, help="a fixable mistake after this step: an error frame, exit 2")
    p.add_argument("--no-kl", action="store_true", help="no kl in the steps (grpo.beta = 0)")
    p.add_argument("--hold", action="store_true", help="after the last step, wait for stop instead of completing")
    p.add_argument("--ignore-stop", action="store_true", help="never answer stop (tests the kill timeout)")
    p.add_argument("--zero-std-from", type=int, default=0, help="from this step on every group ties")
    p.add_argument("--curriculum", action="store_true", help="steps carry a curriculum's pool (docs/curriculum.md)")
    p.add_argument("--async-steps", action="store_true", help="steps carry [async]'s figures (docs/async.md)")
    p.add_argument("--output-dir", default="", help="write tiny safetensors checkpoints here")
    p.add_argument("--resume", default="", help='"latest": a dashboard restart (resume after the last checkpoint)')
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--hostile", action="store_true", help="completions full of escapes and markup")
    p.add_argument("--garbage", action="store_true", help="send a line that is not a frame after init")
    p.add_argument("--eval-every", type=int, default=0, help="send eval frames at step 0 and every N steps")
    p.add_argument("--agent", action="store_true", help="samples are agent conversations (turns with tool calls)")
    p.add_argument("--findings-at", type=int, default=0, help="the run doctor's findings from this step on")
    p.add_argument("--probe", action="store_true", help="[doctor] probe = true: the probe's finding before step 1")
    return p.parse_args(argv)


class Fake:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = sys.stdout.buffer
        self.commands: queue.Queue[m.Command | None] = queue.Queue()
        self.paused = False
        self.mode: m.SampleDisplay = "best_worst"
        self.start = time.monotonic()
        self.frames = 0
        self.last_checkpoint = 0

    def send(self, message: m.Event) -> None:
        if self.args.fps > 0:  # pace frames evenly
            due = self.start + self.frames / self.args.fps
            time.sleep(max(0.0, due - time.monotonic()))
        self.out.write(codec.encode(message))
        self.out.flush()
        self.frames += 1

    def read_commands(self) -> None:
        for line in sys.stdin.buffer:
            try:
                self.commands.put(codec.decode_command(line))
            except codec.ProtocolError as exc:
                print(f"fake worker: bad command {exc}", file=sys.stderr, flush=True)
        self.commands.put(None)  # EOF: the dashboard is gone

    def handle(self, cmd: m.Command | None, step: int) -> bool:
        """Answer one command; True when the run must end now."""
        if cmd is None:
            self.checkpoint(step, "final")
            return True
        if isinstance(cmd, m.Pause):
            if self.paused:
                self.send(m.Error(message="pause while already paused"))
            else:
                self.paused = True
                self.send(m.Status(phase="idle", message="paused"))
                self.send(m.Paused(step=step))
        elif isinstance(cmd, m.Resume):
            if not self.paused:
                self.send(m.Error(message="resume while not paused"))
            else:
                self.paused = False
                self.send(m.Resumed(step=step))
        elif isinstance(cmd, m.SaveCheckpoint):
            self.checkpoint(step, "manual")
        elif isinstance(cmd, m.SetSampleDisplay):
            self.mode = cmd.mode
            self.send(m.SampleDisplayChanged(mode=cmd.mode))
            self.send(m.Log(level="info", message=f"sample display: {cmd.mode}"))
        elif isinstance(cmd, m.Stop):
            if self.args.ignore_stop:
                print("fake worker: ignoring stop", file=sys.stderr, flush=True)
                return False
            self.checkpoint(step, "final")
            self.send(m.Complete(total_steps=step, seconds=time.monotonic() - self.start, status="stopped"))
            return True
        return False

    def checkpoint(self, step: int, kind: str) -> None:
        self.send(m.Status(phase="saving", message=f"saving {kind} checkpoint"))
        name = "final" if kind == "final" else f"checkpoint-{step}"
        path = Path(self.args.output_dir or "/nonexistent") / name
        if self.args.output_dir:
            write_checkpoint(path, step)
        self.last_checkpoint = step
        self.send(m.Checkpoint(path=str(path), step=step, kind=kind))  # type: ignore[arg-type]

    def drain(self, step: int, block: bool) -> bool:
        """Handle queued commands; while paused, block until resumed. True = end the run."""
        while True:
            try:
                cmd = self.commands.get(block=block or self.paused, timeout=None)
            except queue.Empty:
                return False
            if self.handle(cmd, step):
                return True
            if not self.paused and self.commands.empty() and not block:
                return False


def write_checkpoint(path: Path, step: int) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    path.mkdir(parents=True, exist_ok=True)
    weights = {"lora_a": np.zeros((8, 16), dtype=np.float16), "lora_b": np.zeros((16, 8), dtype=np.float16)}
    save_file(weights, str(path / "adapters.safetensors"))
    (path / "training_state.json").write_text(json.dumps({"step": step}))


WORDS = "first add the ones then carry one into the tens and check the sum against the question".split()


def completion(step: int, i: int, chars: int, hostile: bool) -> str:
    """The answer text, as the real worker sends it (its thinking goes in ``thinking``), then reasoning
    words to fill ``chars``: one answer per completion, so a view that shows it twice is a bug."""
    text = f"<answer>{(step * 7 + i) % 97}</answer> "
    if hostile:
        text += "[bold red]not bold[/] [link=http://x]l[/link] \x1b[31mred\x1b[0m \x1b]0;title\x07 a\bb\rc\x07 "
    k = step + i
    while len(text) < chars:
        text += WORDS[k % len(WORDS)] + " "
        k += 1
    return text[:chars]


def completion_rewards(step: int, args: argparse.Namespace, mean: float, tie: bool) -> list[float | None]:
    """Every completion's reward: spread around the mean early, narrowing and saturating at 1 later."""
    spread = 0.0 if tie else 0.8 / (1 + step / 6)
    count = max(args.samples, args.group_size * 4)
    return [min(1.0, max(0.0, mean + spread * (((j * 37 + step * 11) % 17) / 16 - 0.5))) for j in range(count)]


def step_frame(step: int, epoch: int, args: argparse.Namespace) -> m.Step:
    tie = args.zero_std_from and step >= args.zero_std_from
    reward = 0.2 + 0.6 * (1 - math.exp(-step / 8))
    return m.Step(
        step=step, epoch=epoch, loss=0.0 if tie else 0.5 * math.exp(-step / 10) + 0.05 * math.sin(step),
        reward=reward, reward_std=0.0 if tie else 0.3 / (1 + step / 10),
        frac_reward_zero_std=1.0 if tie else 0.25, rewards={"accuracy": reward, "xml_format": 0.9},
        kl=None if args.no_kl else 0.001 * step, entropy=1.2, completion_mean_length=20.0 + step % 5,
        completion_min_length=12.0 + step % 3, completion_max_length=24.0, completion_clipped_ratio=0.125,
        completion_rewards=completion_rewards(step, args, reward, bool(tie)), advantage_std=0.4,
        clip_ratio=m.ClipRatio(low=0.01, high=0.02 + 0.001 * (step % 4), region=0.03),
        num_tokens=640, generation_ms=300.0, scoring_ms=20.0, training_ms=180.0,
        generation_tokens_per_s=2000.0, training_tokens_per_s=3500.0 + 10 * step,
        grad_norm=0.5 + 0.1 * math.sin(step / 3), learning_rate=2e-4, peak_memory_mb=812.5, active_memory_mb=600.0,
        extra_metrics={**(curriculum_pool(step) if getattr(args, "curriculum", False) else {}),
                       **(async_figures(step) if getattr(args, "async_steps", False) else {})},
    )


def async_figures(step: int) -> dict[str, float]:
    """An [async] run's step, max_staleness 2: the learner waits on the generator early (a slow reward),
    then the generator gets ahead and waits at its bound."""
    ahead = step > 12
    return {"async/staleness_max": float(min(step - 1, 2 if ahead else 1)), "async/staleness_mean": float(min(step - 1, 2 if ahead else 1)),
            "async/is_clipped": 0.02 + 0.01 * (step % 3), "sampling/importance_sampling_ratio/mean": 1.0 + 0.01 * (step % 4),
            "async/queue_depth": 2.0 if ahead else 0.0, "async/generator_busy": 0.55 if ahead else 0.97,
            "async/learner_busy": 0.96 if ahead else 0.45, "async/wait_ms": 15.0 if ahead else 320.0}


def curriculum_pool(step: int, prompts: int = 400, per_step: int = 8) -> dict[str, float]:
    """A curriculum's pool after ``step``: unseen prompts drawn ``per_step`` at a time, the seen ones
    moving from too hard through learning to solved as the run goes on."""
    seen = min(prompts, step * per_step)
    solved = round(seen * min(0.6, step / 40))
    too_hard = round((seen - solved) * max(0.2, 0.6 - step / 40))
    return {"curriculum/unseen": float(prompts - seen), "curriculum/too_hard": float(too_hard),
            "curriculum/learning": float(seen - solved - too_hard), "curriculum/solved": float(solved),
            "curriculum/revisits": float(step % 2), "curriculum/uniform_flat_share": 0.2 + 0.3 * min(1.0, step / 24)}


def findings(step: int) -> list[m.Finding]:
    """A critical truncation with its evidence and suggested change, and a warning without one."""
    return [
        m.Finding(name="truncation", severity="critical", step=step, since=step - 4, numbers={
            "truncated_share": 0.62, "finished_p95_tokens": 21.0, "limit": 24.0},
            message="62 % of the last 10 steps' completions are cut at max_completion_length = 24 (finish reason "
                    "'length'); set generation.max_completion_length to at least 48",
            evidence=m.Evidence(steps=[step - 1, step], generations=[(step, 0, 2), (step, 1, 1)], finish_reason="length"),
            suggestion="generation.max_completion_length=48"),
        m.Finding(name="pass_rate", severity="warning", step=step, since=step - 2, numbers={"pass_0": 0.1, "pass_100": 0.7},
                  message="80 % of the prompts of the last 10 steps are at a 0 % or 100 % pass rate: most are too easy",
                  evidence=m.Evidence(steps=[step - 2, step - 1, step])),
    ]


def eval_frame(step: int) -> m.Eval:
    """A held-out accuracy that climbs with the step."""
    accuracy = round(0.4 + 0.35 * (1 - math.exp(-step / 10)), 4)
    return m.Eval(step=step, rewards={"accuracy": accuracy}, reward=accuracy, accuracy=accuracy, num_prompts=200,
                  seconds=1.5)


def run(args: argparse.Namespace) -> int:
    fake = Fake(args)
    threading.Thread(target=fake.read_commands, daemon=True).start()
    print("fake worker: starting", file=sys.stderr, flush=True)
    fake.send(m.Hello(protocol_version=args.protocol_version, worker_version="fake-0", pid=os.getpid()))
    if args.protocol_version != m.PROTOCOL_VERSION:
        time.sleep(30)  # a real mismatched worker would carry on; the dashboard must kill it
        return 0
    fake.send(m.Status(phase="loading", message="loading model"))
    steps_per_epoch = max(args.steps // 2, 1)
    fake.send(m.Init(
        model="tiny-fake", model_path="/models/tiny-fake", config={"name": "fake-run", "grpo": {"group_size": 4}},
        dataset_size=steps_per_epoch * 4, steps_per_epoch=steps_per_epoch, total_steps=args.steps,
        num_epochs=2, output_dir=args.output_dir, sample_display=fake.mode,
    ))
    fake.send(m.DatabasePath(path=os.path.join(args.output_dir or "/tmp", "outputs.db"), run_id=1, run_name="fake-run"))
    if args.probe:
        fake.send(m.Finding(name="probe", severity="warning", step=0, since=0, numbers={"pass_0": 0.0, "truncated": 0.94},
                            message="before step 1, 16 prompts × 4 completions: 0 % of the prompts never rewarded, 6 % "
                                    "always, 94 % of the completions cut; verdict: 94 % of completions are cut at "
                                    "max_completion_length = 24: set it to at least 64",
                            suggestion="generation.max_completion_length=64"))
    if args.garbage:
        fake.out.write(b"this is not a frame {\n")
        fake.out.flush()
    restarted = args.resume == "latest"
    marker = Path(args.output_dir or "/tmp") / ".fake-crashed"
    first = 1
    if restarted and marker.exists():
        first = int(marker.read_text() or 0) + 1
        history = [step_frame(s, (s - 1) // steps_per_epoch, args) for s in range(1, first)]
        rewards = [h.reward for h in history if h.reward is not None]
        losses = [h.loss for h in history if h.loss is not None]
        aggregates = m.Aggregates(
            best_reward=max(rewards, default=None), avg_reward=sum(rewards) / len(rewards) if rewards else None,
            reward_steps=len(rewards), best_loss=min(losses, default=None),
            avg_loss=sum(losses) / len(losses) if losses else None, loss_steps=len(losses),
        )  # fmt: skip
        fake.send(m.ResumeState(step=first - 1, epoch=(first - 2) // steps_per_epoch, total_epochs=2,
                                step_in_epoch=(first - 2) % steps_per_epoch + 1, steps_per_epoch=steps_per_epoch,
                                history=history, aggregates=aggregates))
        fake.send(m.Log(level="info", message=f"resumed from step {first - 1}"))
    if args.eval_every and first == 1:
        fake.send(eval_frame(0))
    for step in range(first, args.steps + 1):
        epoch = (step - 1) // steps_per_epoch  # 0-based, like the real worker
        if (step - 1) % steps_per_epoch == 0:
            fake.send(m.EpochStart(epoch=epoch, total_epochs=2, steps_in_epoch=steps_per_epoch))
        fake.send(m.Status(phase="generating"))
        fake.send(m.Status(phase="training"))
        fake.send(step_frame(step, epoch, args))
        for i in range(args.samples):
            fake.send(m.Sample(
                step=step, index=i, group=i // args.group_size, prompt=f"What is {step} + {i}? Answer in <answer>.",
                completion=completion(step, i, args.completion_chars, args.hostile), reward=1.0 - 0.25 * (i % 4),
                reward_details={"accuracy": 1.0 if i % 2 == 0 else 0.0, "xml_format": 0.5},
                advantage=0.5 - 0.25 * (i % 4), num_tokens=20 + i, finish_reason="length" if i % 3 == 2 else "stop",
                thinking=f"step {step} sample {i}",
                tool_calls=[m.ToolCall(index=0, name="calc", arguments={"a": step}, raw='{"name":"calc"}')] if i == 1 else [],
                turns=agent_turns(step, i) if args.agent else [],
            ))
        fake.send(m.Log(level="debug" if step % 2 else "info", message=f"step {step} done"))
        if args.eval_every and step % args.eval_every == 0:
            fake.send(eval_frame(step))
        if args.findings_at and step == args.findings_at:
            for finding in findings(step):
                fake.send(finding)
        if args.save_every and step % args.save_every == 0:
            fake.checkpoint(step, "periodic")
        if args.mistake_at and step == args.mistake_at:
            fake.send(m.Error(message=MISTAKE, fatal=True, exit_code=2, kind="reward"))
            return 2
        if args.crash_at and step == args.crash_at and not restarted:
            marker.write_text(str(fake.last_checkpoint or step))
            boom = "[/bold] [link=x]boom\x1b[2J" if args.hostile else "boom"
            print(f"fake worker: Traceback (most recent call last): {boom}", file=sys.stderr, flush=True)
            return 7  # dies without a frame, like os._exit(7) in a reward: a crash
        if fake.drain(step, block=False):
            return 0
    if args.hold:
        while not fake.drain(args.steps, block=True):
            pass
        return 0
    fake.checkpoint(args.steps, "final")
    fake.send(m.Complete(total_steps=args.steps, seconds=time.monotonic() - fake.start, status="completed"))
    return 0


MISTAKE = "reward function 'correct' returned 2 scores for 4 completions; return one number (or None) per completion"


def agent_turns(step: int, i: int) -> list[m.Turn]:
    """An agent conversation: a good call, a failed one, the answer."""
    call = '<tool_call>{"name": "multiply", "arguments": {"a": %d, "b": %d}}</tool_call>' % (step, i + 10)
    return [
        m.Turn(role="assistant", content=call),
        m.Turn(role="tool", content=str(step * (i + 10)), name="multiply", arguments={"a": step, "b": i + 10},
               seconds=0.0012),
        m.Turn(role="assistant", content='<tool_call>{"name": "divide", "arguments": {"a": 1}}</tool_call>'),
        m.Turn(role="tool", content="Error: unknown tool 'divide' (available: multiply)", name="divide",
               arguments={"a": 1}, error="unknown tool 'divide' (available: multiply)", seconds=None),
        m.Turn(role="assistant", content=f"<answer>{step * (i + 10)}</answer>"),
    ]


if __name__ == "__main__":
    code = run(parse_args())
    sys.stdout.flush()
    os._exit(code)  # the stdin reader thread may be blocked in a read; don't wait for it

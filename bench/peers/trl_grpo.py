"""TRL's ``GRPOTrainer`` on torch CPU, run in its own virtualenv: ``python trl_grpo.py SPEC.json``.

Full fine-tuning in float32 (the model folder's dtype), no reference model (beta = 0), loss_type
"dapo", no gradient checkpointing (TRL's default turns it on; grpo-tui does not checkpoint),
generation with transformers' ``generate`` (TRL's default without vLLM), one optimizer step per
generation batch (``steps_per_generation`` = 1, ``num_iterations`` = 1). Fixed-length generation:
``min_new_tokens`` = the completion length, so EOS cannot end a completion early. The step time is
the wall time between consecutive ``on_step_end`` callbacks.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PhaseTimer, StepClock, bench_reward, load_spec, max_rss_mb, write_result  # noqa: E402

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402


def accuracy(completions, answer, **kwargs):
    return [bench_reward(c[0]["content"], a) for c, a in zip(completions, answer)]


class Recorder(TrainerCallback):
    def __init__(self, rows_per_step: int) -> None:
        self.rows_per_step = rows_per_step
        self.clock = StepClock()
        self.steps: list[dict] = []
        self.logs: dict[int, dict] = {}
        self.generation: PhaseTimer | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.clock.reset()

    def on_step_end(self, args, state, control, **kwargs):
        wall, cpu = self.clock.mark()
        gen = self.generation.take() if self.generation else None
        self.steps.append({"s": wall, "cpu_s": cpu, "generation_s": gen, "max_rss_mb": max_rss_mb()})
        print(f"step {state.global_step}: {wall:.2f}s", file=sys.stderr)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "completions/mean_length" in logs:
            self.logs[state.global_step] = dict(logs)


def main() -> None:
    spec = load_spec()
    torch.manual_seed(spec["seed"])
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    rows = [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]} for r in spec["rows"]]
    total = spec["warmup"] + spec["steps"]
    G, T = spec["group_size"], spec["max_completion_length"]
    config = GRPOConfig(
        output_dir=spec.get("workdir") or tempfile.mkdtemp(),
        per_device_train_batch_size=spec["batch_size"] * G,
        gradient_accumulation_steps=1,
        num_generations=G,
        max_completion_length=T,
        learning_rate=spec["learning_rate"],
        lr_scheduler_type="constant",
        max_steps=total,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        beta=0.0,
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        temperature=spec["temperature"],
        top_p=1.0,
        top_k=0,
        shuffle_dataset=False,
        seed=spec["seed"],
        generation_kwargs={"min_new_tokens": T} if spec["fixed_length"] else None,
        dataloader_num_workers=0,
    )
    recorder = Recorder(spec["batch_size"] * G)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[accuracy],
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[recorder],
    )
    # The generation phase: transformers' generate inside _generate_single_turn.
    recorder.generation = PhaseTimer(trainer._generate_single_turn)
    trainer._generate_single_turn = recorder.generation
    trainer.train()
    for n, step in enumerate(recorder.steps, 1):
        logs = recorder.logs.get(n, {})
        step["generated_tokens"] = round(logs.get("completions/mean_length", 0.0) * recorder.rows_per_step)
    params = sum(p.numel() for p in model.parameters())
    write_result(
        spec,
        {"system": "trl", "params": params, "torch_threads": torch.get_num_threads(), "steps": recorder.steps},
    )


if __name__ == "__main__":
    main()

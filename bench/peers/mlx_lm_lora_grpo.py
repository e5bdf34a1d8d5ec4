"""mlx-lm-lora's GRPO (``train_grpo``), run in its own virtualenv: ``python mlx_lm_lora_grpo.py SPEC.json``.

Full fine-tuning (no adapters: the model is left unfrozen, so ``train_grpo`` differentiates every
weight), no reference model (beta = 0), AdamW at the spec's learning rate, one report per step. The
step time is the wall time between consecutive ``on_train_loss_report`` callbacks, which
``train_grpo`` makes after the step's generation, scoring, loss/gradient and update are evaluated.
Fixed-length generation: no EOS and no ``end_answer_token``, so every completion is max length.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PhaseTimer, StepClock, bench_reward, load_spec, max_rss_mb, write_result  # noqa: E402

import mlx.core as mx  # noqa: E402
import mlx.optimizers as optim  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402
from mlx_lm import load  # noqa: E402
from mlx_lm.tuner.callbacks import TrainingCallback  # noqa: E402
from mlx_lm_lora.trainer import grpo_trainer  # noqa: E402
from mlx_lm_lora.trainer.grpo_trainer import GRPOTrainingArgs, train_grpo  # noqa: E402


# train_grpo calls the module-level generate_grpo: time it there (the generation phase).
GENERATION = PhaseTimer(grpo_trainer.generate_grpo)
grpo_trainer.generate_grpo = GENERATION


def accuracy(prompts, completions, answer, types=None):
    return [bench_reward(c, a) for c, a in zip(completions, answer)]


class Recorder(TrainingCallback):
    def __init__(self, rows_per_step: int) -> None:
        self.rows_per_step = rows_per_step
        self.clock = StepClock()
        self.steps: list[dict] = []

    def on_train_loss_report(self, info: dict) -> None:
        wall, cpu = self.clock.mark()
        n = len(self.steps) + 1
        self.steps.append(
            {
                "s": wall,
                "cpu_s": cpu,
                "generation_s": GENERATION.take(),
                "generated_tokens": round(info["train_average_generated_tokens"] * self.rows_per_step),
                "peak_memory_mb": info["peak_memory"] * 1e9 / 2**20,
                "max_rss_mb": max_rss_mb(),
            }
        )
        print(f"step {n}: {wall:.2f}s", file=sys.stderr)
        mx.reset_peak_memory()
        self.clock.reset()  # exclude this callback's own time


def main() -> None:
    spec = load_spec()
    model, tokenizer = load(spec["model"])
    if spec["fixed_length"]:
        tokenizer.eos_token_ids = set()
    rows = spec["rows"]
    dataset = []
    for r in rows:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}], add_generation_prompt=True)
        dataset.append((list(ids), tokenizer.encode(r["answer"]), r["prompt"], r["answer"]))
    total = spec["warmup"] + spec["steps"]
    work = Path(spec.get("workdir") or tempfile.mkdtemp())
    args = GRPOTrainingArgs(
        batch_size=spec["batch_size"],
        iters=total,
        steps_per_report=1,
        steps_per_eval=10**9,
        steps_per_save=10**9,
        adapter_file=str(work / "adapters.safetensors"),
        max_seq_length=4096,
        grad_checkpoint=False,
        group_size=spec["group_size"],
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        max_completion_length=spec["max_completion_length"],
        temperature=spec["temperature"],
        top_p=1.0,
        top_k=0,
        min_p=0.0,
        grpo_loss_type="bnpo",  # its closest to our dapo on one micro-batch; same cost
    )
    mx.random.seed(spec["seed"])
    model.train()
    recorder = Recorder(spec["batch_size"] * spec["group_size"])
    train_grpo(
        model=model,
        ref_model=None,
        tokenizer=tokenizer,
        optimizer=optim.AdamW(learning_rate=spec["learning_rate"]),
        train_dataset=dataset,
        val_dataset=None,
        reward_funcs=[accuracy],
        args=args,
        training_callback=recorder,
        end_answer_token="",
    )
    params = sum(v.size for _, v in tree_flatten(model.parameters()))
    write_result(spec, {"system": "mlx-lm-lora", "params": params, "steps": recorder.steps})


if __name__ == "__main__":
    main()

"""grpo-tui's GRPO step, run in the project's virtualenv: ``python grpo_tui_step.py SPEC.json``.

Drives ``worker.engine.trainer.Trainer.train_step`` exactly as the worker does, on the spec's rows. When
the spec asks for it, also measures, in the same process and with the same BLAS:
- rollout tokens/s of ``worker.engine.policy.rollout.generate`` against raw ``mlx_lm.generate.batch_generate``
  on a stock ``mlx_lm.load`` of the same model (same prompts, same sampler, same number of
  concurrent sequences, fixed length);
- the sgemm peak (float32 square matmuls) the training phase's model-FLOPs utilisation is
  measured against.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_spec, max_rss_mb, rss_mb, write_result  # noqa: E402

import mlx.core as mx  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402
from mlx_lm import load  # noqa: E402
from mlx_lm.generate import batch_generate  # noqa: E402

from grpo_tui.common.blas import active_blas  # noqa: E402
from grpo_tui.protocol.config import parse_config  # noqa: E402
from grpo_tui.worker.engine.models import plan as engine_plan  # noqa: E402
from grpo_tui.worker.engine.policy import rollout  # noqa: E402
from grpo_tui.worker.engine.trainer import MlxTrainer  # noqa: E402

CONFIG = """
[model]
path = {model!r}
[data]
path = {data!r}
shuffle = false
[[rewards]]
function = {reward!r}
[grpo]
group_size = {group_size}
loss_type = "dapo"
epsilon = 0.2
epsilon_high = 0.28
beta = 0.0
[generation]
max_completion_length = {max_completion_length}
temperature = {temperature}
[training]
learning_rate = {learning_rate}
batch_size = {batch_size}
max_steps = {total_steps}
seed = {seed}
{training_extra}
[checkpoint]
output_dir = {output_dir!r}
[store]
enabled = false
{lora}
"""


def make_trainer(spec: dict) -> MlxTrainer:
    work = Path(spec["workdir"])
    data = work / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in spec["rows"]))
    text = CONFIG.format(
        **{k: v for k, v in spec.items() if k not in ("lora", "training")},  # written below as TOML
        data=str(data),
        output_dir=str(work / "run"),
        total_steps=spec["warmup"] + spec["steps"],
        reward=str(Path(__file__).resolve().parent / "common.py") + ":grpo_tui_reward",
        # bench/memory.py: extra [training] keys (the memory switches) and LoRA adapters.
        training_extra="".join(f"{k} = {json.dumps(v)}\n" for k, v in spec.get("training", {}).items()),
        lora="[model.lora]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in spec["lora"].items())
        if spec.get("lora") else "",
    )
    trainer = MlxTrainer(parse_config(text), log=lambda level, msg: print(f"[{level}] {msg}", file=sys.stderr))
    if spec["fixed_length"]:
        trainer.policy.tokenizer.eos_token_ids = set()  # no stop token: every completion is max length
    return trainer


def run_steps(trainer: MlxTrainer, spec: dict) -> list[dict]:
    steps = []
    for step in range(1, spec["warmup"] + spec["steps"] + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        phases: dict[str, float] = {}  # CPU time at the start of each phase
        rollout_peak: list[float] = []  # MLX's peak when training begins: the rollout's and scoring's

        def on_phase(phase: str) -> None:
            phases.setdefault(phase, time.process_time())
            if phase == "training" and not rollout_peak:
                rollout_peak.append(mx.get_peak_memory() / 2**20)

        m = trainer.train_step(step, on_phase=on_phase).metrics
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        generated = round(m.completion_mean_length * spec["batch_size"] * spec["group_size"])
        steps.append(
            {
                "s": wall,
                "cpu_s": cpu,
                "generation_s": m.generation_ms / 1000,
                "training_s": m.training_ms / 1000,
                "generated_tokens": generated,
                "training_tokens": m.num_tokens,  # prompt + completion tokens the training forward sees
                "peak_memory_mb": m.peak_memory_mb,
                "rollout_peak_memory_mb": rollout_peak[0] if rollout_peak else None,
                "max_rss_mb": max_rss_mb(),  # the process's peak resident memory so far
                # The training phase's CPU time (all threads): steadier than wall time on a busy machine.
                "training_cpu_s": c0 + cpu - phases["training"] if "training" in phases else None,
            }
        )
        print(f"step {step}: {wall:.2f}s {json.dumps(steps[-1])}", file=sys.stderr)
    return steps


def rollout_vs_batch_generate(trainer: MlxTrainer, spec: dict, repeats: int) -> dict:
    """Generated tokens/s of our rollout and of raw batch_generate, interleaved, median of repeats."""
    from mlx_lm.sample_utils import make_sampler

    G, gen = spec["group_size"], trainer.parts.config.generation
    prompts = [trainer.prompts.dataset[i].prompt_ids for i in range(spec["batch_size"])]
    flat = [p for p in prompts for _ in range(G)]
    stock, _ = load(spec["model"])  # raw mlx-lm: its own model, without the engine's layer patches
    def run_ours() -> int:
        completions = rollout.generate(trainer.policy.model, trainer.policy.tokenizer, prompts, G, gen, logprobs=False,
                                       plan=trainer.policy.plan, decode=trainer.policy.decode)
        return sum(len(c.token_ids) for c in completions)

    def run_raw() -> int:
        out = batch_generate(
            stock,
            trainer.policy.tokenizer,
            flat,
            max_tokens=gen.max_completion_length,
            sampler=make_sampler(temp=gen.temperature),
            completion_batch_size=len(flat),
            prefill_batch_size=len(flat),
            return_token_ids=True,
        )
        return sum(len(ids) for ids in out.token_ids)

    ours, raw = [], []
    for rep in range(repeats):
        order = [(run_ours, ours), (run_raw, raw)]
        for fn, into in order if rep % 2 == 0 else order[::-1]:  # alternate who goes first
            t0 = time.perf_counter()
            tokens = fn()
            into.append(tokens / (time.perf_counter() - t0))
    return {"ours_tokens_per_s": statistics.median(ours), "batch_generate_tokens_per_s": statistics.median(raw)}


def sgemm_peak(sizes: tuple[int, ...] = (1024, 2048), repeats: int = 5) -> float:
    """Best float32 matmul throughput (FLOP/s) over a few square sizes."""
    best = 0.0
    for n in sizes:
        a, b = mx.random.normal((n, n)), mx.random.normal((n, n))
        mx.eval(a, b, a @ b)
        for _ in range(repeats):
            t0 = time.perf_counter()
            mx.eval(a @ b)
            best = max(best, 2 * n**3 / (time.perf_counter() - t0))
    return best


def main() -> None:
    spec = load_spec()
    blas = active_blas()
    print(f"BLAS: {blas}", file=sys.stderr)
    trainer = make_trainer(spec)
    params = sum(v.size for _, v in tree_flatten(trainer.policy.model.parameters()))
    # What memory_limit_gb's estimate sees (bench/memory_limit.py --estimate), and the process before
    # its first step: resident memory, and MLX's arrays (weights, AdamW's moments) within it.
    prompt_tokens = max(len(e.prompt_ids) for e in trainer.prompts.dataset)
    shape = engine_plan.fit_shape(trainer.policy.model, trainer.parts.config, prompt_tokens)
    loaded = {"prompt_tokens": prompt_tokens, "fit_shape": dataclasses.asdict(shape),
              "loaded_rss_mb": rss_mb(), "loaded_active_mb": mx.get_active_memory() / 2**20}
    result = {"system": "grpo-tui", "blas": blas, "params": params, **loaded, "steps": run_steps(trainer, spec)}
    # The training run's peak RSS, before the rollout comparison loads a second, stock model.
    result["max_rss_mb"] = max_rss_mb()
    if spec.get("rollout_repeats"):
        result["rollout"] = rollout_vs_batch_generate(trainer, spec, spec["rollout_repeats"])
    if spec.get("sgemm"):
        result["sgemm_flops"] = sgemm_peak()
    write_result(spec, result)


if __name__ == "__main__":
    main()

"""One GRPO step, side by side: grpo-tui vs TRL's GRPOTrainer (torch CPU) vs mlx-lm-lora's GRPO.

    .venv/bin/python bench/step_vs_peers.py                    # both shapes + memory probe (about 13 min on 2 cores)
    .venv/bin/python bench/step_vs_peers.py --quick            # demo shape, 2 steps (about 2 min)
    .venv/bin/python bench/step_vs_peers.py --shape qwen3-0.6b --steps 3
    .venv/bin/python bench/step_vs_peers.py --shapes realistic  # real-vocab-tiny, qwen2.5-0.5b, prompt-heavy

Every system does identical work in one run: the same model folder (``bench/shapes.py``), the same
prompts (``examples/data/arith.jsonl`` rendered with the model's chat template), group size,
completion length, learning rate and number of steps; full fine-tuning in float32, beta = 0,
AdamW. Generation is forced to fixed length in all three (no stop token; TRL: ``min_new_tokens``)
so that an early EOS cannot make one system's step cheaper; the generated tokens per step are
printed to show it. Each system runs in its own process (the peers in their own virtualenvs under
``.bench/``, created here when missing); the MLX ones get the same optimized BLAS preloaded
(``protocol.blas.child_env``), torch uses its own bundled MKL.

Printed per shape: median wall-clock s/step over the steps after the warm-up and median CPU-s/step
(all threads of the process: steadier than wall time when other programs share the machine),
grpo-tui's speed-up over each peer by both, generated tokens per step, peak memory per step (``mx.get_peak_memory``, MLX systems) and
each process's peak resident memory over its training steps (``VmHWM``: what a user's memory monitor shows; torch's for
TRL), read after each step so that the runners' extra measurements after the steps do not count; grpo-tui's rollout tokens/s against raw ``mlx_lm.batch_generate``; and the
training phase's model-FLOPs utilisation: 6 · parameters · tokens / training-phase time, against the
float32 sgemm peak measured in the same process with the same BLAS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import shapes  # noqa: E402

from grpo_tui.common.blas import child_env, describe  # noqa: E402

BENCH = ROOT / ".bench"
PEERS = ROOT / "bench" / "peers"
VENVS = {
    "trl": (BENCH / "venv-trl", ["torch==2.13.0", "trl==1.16.0", "transformers==5.24.0", "accelerate", "datasets"]),
    "mlx-lm-lora": (BENCH / "venv-mlxlora", ["mlx[cpu]==0.32.4", "mlx-lm==0.32.2", "mlx-lm-lora==5.10.2", "mkl"]),
}
RUNNERS = {"grpo-tui": "grpo_tui_step.py", "trl": "trl_grpo.py", "mlx-lm-lora": "mlx_lm_lora_grpo.py"}
SYSTEMS = tuple(RUNNERS)

# The work per shape: prompts per step, group size, completion tokens, learning rate, steps.
SHAPES = {
    "demo": {"batch_size": 8, "group_size": 8, "max_completion_length": 24, "learning_rate": 2e-4, "steps": 5},
    "qwen3-0.6b": {"batch_size": 2, "group_size": 4, "max_completion_length": 32, "learning_rate": 1e-6, "steps": 3},
    # Realistic shapes (not in the default run; ``--shape realistic``): the tiny model with the real
    # 151,936-token BPE, a 0.5B model with 128-token completions, and the 0.6B shape with 256-token
    # prompts (``prompt_tokens``: a filler context before each prompt).
    "real-vocab-tiny": {"batch_size": 8, "group_size": 8, "max_completion_length": 32, "learning_rate": 1e-5, "steps": 3},
    # Both run grpo-tui's default path (its 0.5B step fits: 7.6 GB MLX peak, 9.9 GB RSS, since the
    # numpy log-softmax is for small models only); the rollout comparison once (a 0.5B rollout is ~40 s).
    "qwen2.5-0.5b": {"batch_size": 2, "group_size": 4, "max_completion_length": 128, "learning_rate": 1e-6, "steps": 2,
                     "rollout_repeats": 1},
    # SmolLM2-135M-Instruct's real weights (a float32 LlamaForCausalLM folder from its GGUF file), the
    # demo's work: 4 prompts x G=8 x 24 tokens, full fine-tuning.
    "smollm2-135m": {"batch_size": 4, "group_size": 8, "max_completion_length": 24, "learning_rate": 1e-6, "steps": 3},
    "prompt-heavy": {"batch_size": 1, "group_size": 8, "max_completion_length": 64, "learning_rate": 1e-6, "steps": 2,
                     "prompt_tokens": 256, "rollout_repeats": 1},
}
DEFAULT_SHAPES = ("demo", "qwen3-0.6b")
GROUPS = {"all": DEFAULT_SHAPES, "realistic": ("real-vocab-tiny", "qwen2.5-0.5b", "prompt-heavy")}
FILLER = "Context: the numbers below are small whole numbers; answer with <answer>N</answer>. "
# The memory question of issue 7: one 0.6B-shaped step with a group of 8 completions of 256 tokens.
MEMORY_PROBE = {"batch_size": 1, "group_size": 8, "max_completion_length": 256, "learning_rate": 1e-6, "steps": 1}


def python_for(system: str) -> str:
    """The interpreter that runs ``system``, creating its virtualenv first when it is missing."""
    if system == "grpo-tui":
        return sys.executable
    venv, packages = VENVS[system]
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} ({', '.join(packages)}) ...", file=sys.stderr)
        base = Path(sys.base_prefix) / "bin" / "python3"
        subprocess.run([str(base), "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return str(python)


def model_folder(shape: str, layers: int | None) -> Path:
    if shape == "demo":
        return shapes.demo_model(wait_s=1800)
    if shape == "real-vocab-tiny":
        return shapes.real_vocab_tiny_model()
    if shape == "smollm2-135m":
        return shapes.smollm2_model()
    return shapes.qwen25_05b_model(layers) if shape == "qwen2.5-0.5b" else shapes.qwen3_06b_model(layers)


def read_rows(path: Path, n: int, prompt_tokens: int = 0) -> list[dict[str, str]]:
    """``n`` rows; with ``prompt_tokens``, each prompt after that many characters of filler context
    (the bench tokenizer is character-level: about one token per character)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if len(rows) < n:
        raise SystemExit(f"{path} has {len(rows)} rows, {n} are needed")
    filler = (FILLER * (prompt_tokens // len(FILLER) + 1))[:prompt_tokens]
    return [{"prompt": (filler + "\n\n" if filler else "") + r["prompt"], "answer": str(r["answer"])} for r in rows[:n]]


def run_system(system: str, work: dict, model: Path, rows_path: Path, logs: Path, timeout: float,
               label: str | None = None, **extra) -> dict:
    """Run one system's runner on ``work`` and return its result (``{"error": ...}`` on failure);
    ``label`` names the run's row and log (a grpo-tui variant), else ``system``."""
    label = label or system
    total = work["warmup"] + work["steps"]
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{system}-"))
    spec = {
        **work,
        "model": str(model),
        "rows": read_rows(rows_path, work["batch_size"] * total, work.get("prompt_tokens", 0)),
        "temperature": 1.0,
        "seed": 0,
        "fixed_length": True,
        "workdir": str(tmp),
        "out": str(tmp / "result.json"),
        **extra,
    }
    (tmp / "spec.json").write_text(json.dumps(spec))
    env = child_env("off" if system == "trl" else "auto")
    log = logs / f"{work['name']}-{label}.log"
    print(f"  {label}: running (log: {log.relative_to(ROOT)}) ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        with open(log, "w") as f:
            proc = subprocess.run(
                [python_for(system), str(PEERS / RUNNERS[system]), str(tmp / "spec.json")],
                env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, cwd=tmp,
            )
    except subprocess.TimeoutExpired:
        return {"system": label, "error": f"timed out after {timeout:.0f}s"}
    if proc.returncode != 0 or not Path(spec["out"]).exists():
        tail = log.read_text().strip().splitlines()[-5:]
        return {"system": label, "error": f"exit {proc.returncode}: " + " | ".join(tail)}
    result = json.loads(Path(spec["out"]).read_text())
    result["process_s"] = time.perf_counter() - t0
    return result


def summarise(result: dict, warmup: int) -> dict:
    """Medians over the measured steps (warm-up dropped)."""
    steps = result["steps"][warmup:] or result["steps"]

    def med(key: str) -> float | None:
        values = [s[key] for s in steps if s.get(key) is not None]
        return statistics.median(values) if values else None

    keys = ("s", "cpu_s", "generation_s", "training_s", "generated_tokens", "training_tokens", "peak_memory_mb")
    summary = {k: med(k) for k in keys}
    # Peak RSS is a high-water mark: the training steps' last reading (all of them, warm-up too),
    # else the process's at exit (which may include a runner's extra measurements).
    rss = [s["max_rss_mb"] for s in result["steps"] if s.get("max_rss_mb") is not None]
    summary["max_rss_mb"] = max(rss) if rss else result.get("max_rss_mb")
    return summary


def _fmt(value: float | None, width: int, spec: str, unit: str = "") -> str:
    return f"{'—' if value is None else f'{value:{spec}}{unit}':>{width}}"


def report(shape: str, work: dict, model: Path, results: dict[str, dict]) -> list[str]:
    config = json.loads((model / "config.json").read_text())
    ours = results.get("grpo-tui", {})
    params = ours.get("params") or shapes.param_count(config)
    width = max(12, *(len(system) for system in results))
    lines = [
        f"== {shape}: {model.relative_to(ROOT)} ({params / 1e6:.1f}M parameters, {config.get('torch_dtype', 'float32')}, "
        f"full fine-tune) · {work['batch_size']} prompts × G={work['group_size']} × {work['max_completion_length']} "
        f"tokens (fixed length) · lr {work['learning_rate']} · median of {work['steps']} steps after {work['warmup']} warm-up"
        + "".join(f" · grpo-tui with {k} = {v}" for k, v in work.get("grpo_tui_training", {}).items()),
        f"{'system':<{width}} {'s/step':>8} {'CPU-s/step':>10} {'generation':>10} {'gen tok/step':>12} {'peak mem/step':>13} "
        f"{'max RSS':>9}   grpo-tui faster by (wall / CPU)",
    ]
    base = summarise(ours, work["warmup"]) if "steps" in ours else None
    for system, result in results.items():
        if "error" in result:
            lines.append(f"{system:<{width}} failed: {result['error']}")
            continue
        s = summarise(result, work["warmup"])
        ratio = ""
        if base and system != "grpo-tui":
            ratio = f"{s['s'] / base['s']:.2f}× / {s['cpu_s'] / base['cpu_s']:.2f}×"
        lines.append(
            f"{system:<{width}} {_fmt(s['s'], 8, '.3f')} {_fmt(s['cpu_s'], 10, '.2f')} {_fmt(s['generation_s'], 9, '.3f', 's')} "
            f"{_fmt(s['generated_tokens'], 12, '.0f')} "
            f"{_fmt(s['peak_memory_mb'], 13, '.0f', ' MB')} {_fmt(s['max_rss_mb'], 9, '.0f', ' MB')}   {ratio}"
        )
    if "steps" not in ours:
        return lines
    s = summarise(ours, work["warmup"])
    lines.append(
        f"grpo-tui phases: generation {s['generation_s']:.3f} s, training {s['training_s']:.3f} s "
        f"(BLAS: {describe(ours.get('blas', '?'))})"
    )
    if "rollout" in ours:
        r = ours["rollout"]
        ratio = r["ours_tokens_per_s"] / r["batch_generate_tokens_per_s"]
        lines.append(
            f"rollout: grpo-tui {r['ours_tokens_per_s']:.0f} tok/s vs raw batch_generate "
            f"{r['batch_generate_tokens_per_s']:.0f} tok/s = {ratio:.2f}× (target ≥ 0.9×)"
        )
    if "sgemm_flops" in ours and s["training_s"]:
        achieved = 6 * params * s["training_tokens"] / s["training_s"]
        lines.append(
            f"training-phase MFU: 6 × {params / 1e6:.1f}M × {s['training_tokens']:.0f} tokens / {s['training_s']:.3f} s = "
            f"{achieved / 1e9:.1f} GFLOP/s = {100 * achieved / ours['sgemm_flops']:.1f}% of the measured sgemm peak "
            f"{ours['sgemm_flops'] / 1e9:.0f} GFLOP/s (target ≥ 40%; tokens as TRL counts them, each row's prompt "
            "included, so the prompt run once per group can put it above 100%)"
        )
    return lines


def _mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def memory_probe(data: Path, logs: Path, timeout: float) -> tuple[list[str], dict]:
    """Peak memory of one steady-state grpo-tui step (AdamW moments allocated) with 1 prompt × G=8 ×
    256 tokens on the 0.6B shape. Every term grows linearly with depth (weights, gradients, moments,
    activations) around a constant (embedding, logits), so two shallow copies of the shape give the
    28-layer figure by a straight line; the full model is measured too when this machine has the
    memory for it."""
    full = shapes.QWEN3_06B["num_hidden_layers"]
    peaks, record = {}, {}
    for layers in (4, 8):
        work = {**MEMORY_PROBE, "name": f"memory-probe-{layers}l", "warmup": 0}
        result = run_system("grpo-tui", work, shapes.qwen3_06b_model(layers), data, logs, timeout)
        record[layers] = result
        if "error" in result:
            return [f"memory probe ({layers} layers) failed: {result['error']}"], record
        peaks[layers] = result["steps"][0]["peak_memory_mb"] / 1024
    per_layer = (peaks[8] - peaks[4]) / 4
    estimate = peaks[4] + per_layer * (full - 4)
    lines = [
        f"memory: a steady-state 0.6B-shaped step, 1 prompt × G=8 × 256 tokens, full fine-tune, float32: "
        f"{peaks[4]:.2f} GiB at 4 layers, {peaks[8]:.2f} GiB at 8 (mx.get_peak_memory) → "
        f"{per_layer:.2f} GiB per layer → {estimate:.1f} GiB at {full} layers"
    ]
    if _mem_available_gib() > 1.15 * estimate:
        work = {**MEMORY_PROBE, "name": f"memory-probe-{full}l", "warmup": 0}
        result = run_system("grpo-tui", work, shapes.qwen3_06b_model(), data, logs, timeout)
        record[full] = result
        if "error" not in result:
            step = result["steps"][0]
            lines.append(f"memory: measured at {full} layers: {step['peak_memory_mb'] / 1024:.2f} GiB, {step['s']:.0f} s")
    else:
        lines.append(f"memory: the {full}-layer step was not run ({_mem_available_gib():.1f} GiB available here)")
    return lines, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", "--shapes", default="all",
                        help=f"a shape ({', '.join(SHAPES)}), a comma-separated list, or a group: "
                             + "; ".join(f"{g} = {', '.join(v)}" for g, v in GROUPS.items()))
    parser.add_argument("--steps", type=int, help="measured steps per system (default: per shape)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ", ".join(SYSTEMS))
    parser.add_argument("--quick", action="store_true", help="demo shape only, 2 steps, no memory probe")
    parser.add_argument("--memory-probe", action=argparse.BooleanOptionalAction, default=None,
                        help="measure a 0.6B-shaped step with G=8 × 256 tokens (default: on with the 0.6B shape)")
    parser.add_argument("--layers", type=int, help="depth of the 0.6B-shaped model (development runs)")
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "data" / "arith.jsonl")
    parser.add_argument("--timeout", type=float, default=1500, help="seconds per system run")
    parser.add_argument("--grpo-tui-training", type=json.loads, default=None, metavar="JSON",
                        help="grpo-tui's [training] switches for every shape instead of the shape's own "
                             "(e.g. '{}': the defaults, to compare default memory)")
    parser.add_argument("--grpo-tui-variant", type=json.loads, action="append", default=[], metavar="JSON",
                        help="one more grpo-tui row with these [training] switches, run right after grpo-tui's "
                             "(repeatable; e.g. '{\"logprob_batch_size\": 2}')")
    args = parser.parse_args(argv)

    chosen = ["demo"] if args.quick else [s for part in args.shape.split(",") for s in GROUPS.get(part.strip(), [part.strip()])]
    if set(chosen) - set(SHAPES):
        parser.error(f"unknown shapes: {', '.join(sorted(set(chosen) - set(SHAPES)))}")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    probe = args.memory_probe if args.memory_probe is not None else ("qwen3-0.6b" in chosen and not args.quick)
    logs = BENCH / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    out_lines = [f"bench/step_vs_peers.py {' '.join(argv if argv is not None else sys.argv[1:])} — {started}"]
    record: dict = {"started": started, "shapes": {}}

    for shape in chosen:
        work = {**SHAPES[shape], "name": shape, "warmup": args.warmup}
        if args.grpo_tui_training is not None:
            work["grpo_tui_training"] = args.grpo_tui_training
        if args.steps:
            work["steps"] = args.steps
        if args.quick:
            work["steps"] = min(work["steps"], 2)
        model = model_folder(shape, args.layers)
        print(f"{shape}: {model}", file=sys.stderr)
        results = {}
        for system in systems:
            extra = {"rollout_repeats": work.get("rollout_repeats", 5), "sgemm": True,
                     "training": work.get("grpo_tui_training", {})} if system == "grpo-tui" else {}
            results[system] = run_system(system, work, model, args.data, logs, args.timeout, **extra)
            for variant in args.grpo_tui_variant if system == "grpo-tui" else ():
                label = "grpo-tui[" + ",".join(f"{k}={v}" for k, v in variant.items()) + "]"
                results[label] = run_system(system, work, model, args.data, logs, args.timeout, label=label,
                                            **{**extra, "training": {**extra["training"], **variant}})
        lines = report(shape, work, model, results)
        print("\n".join(lines), flush=True)
        out_lines += lines
        record["shapes"][shape] = {"work": work, "model": str(model), "results": results}

    if probe:
        lines, record["memory_probe"] = memory_probe(args.data, logs, args.timeout)
        print("\n".join(lines), flush=True)
        out_lines += lines

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    (BENCH / f"step_vs_peers-{stamp}.json").write_text(json.dumps(record, indent=1))
    (BENCH / f"step_vs_peers-{stamp}.txt").write_text("\n".join(out_lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

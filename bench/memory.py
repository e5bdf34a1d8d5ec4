"""Memory against speed: grpo-tui's default step vs the memory switches, side by side.

    .venv/bin/python bench/memory.py                      # 0.6B shape at 4 and 8 layers, full and LoRA (about 10 min on 2 cores)
    .venv/bin/python bench/memory.py --shape 1.7b         # Qwen3-1.7B's dimensions at 2 and 4 layers
    .venv/bin/python bench/memory.py --shape 4b --finetune full --layers 1,2
    .venv/bin/python bench/memory.py --layers 4 --finetune full --switches '{"vocab_chunk_size": 256}'
    .venv/bin/python bench/memory_table.py                # the fit table over the saved runs

The work is the issue's memory shape on a Qwen3-shaped model with random weights
(``bench/shapes.py``: ``--shape`` 0.6b, 1.7b or 4b): one prompt × G = 8 completions × 256 tokens,
fixed length, float32, AdamW's moments allocated before the first step (the trainer does so). Each
configuration runs in its own process (the ``bench/peers/grpo_tui_step.py`` runner, one warm-up step
and the measured steps), one after the other, never two at once. Printed per configuration: peak MLX
memory (``mx.get_peak_memory``), the process's peak resident memory (``VmHWM``), wall s/step and the
training phase's share, and each mode's ratio to the default. Every term of a step's memory and time
grows linearly with depth around a constant (embedding, logits), so two depths give the full-depth
figures by a straight line (or list the full depth among ``--layers`` to measure it); the rows are
saved as ``.bench/memory-*.json`` for ``bench/memory_table.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import shapes  # noqa: E402
from memory_table import extrapolate, table  # noqa: E402
from step_vs_peers import BENCH, MEMORY_PROBE, run_system, summarise  # noqa: E402

# The memory switches as a user would set them for this shape (docs/config.md, "Memory").
SWITCHES = {"gradient_checkpointing": True, "logprob_batch_size": 4, "vocab_chunk_size": 64}
LORA = {"rank": 16, "layers": -1}
GIB = 1024
# Two depths per shape that fit a shared 24 GiB machine with room to spare (full fine-tuning's
# float32 state alone is 16 bytes a parameter: the 4B shape at 2 layers is 8.8 GiB of it).
DEPTHS = {"0.6b": "4,8", "1.7b": "2,4", "4b": "1,2"}


def measure(shape: str, layers: int, finetune: str, mode: str, switches: dict, steps: int, warmup: int,
            data: Path, timeout: float) -> dict:
    work = {**MEMORY_PROBE, "name": f"memory-{shape}-{layers}l-{finetune}-{mode}", "warmup": warmup, "steps": steps}
    extra = {"training": switches if mode == "switches" else {}}
    if finetune == "lora":
        extra["lora"] = LORA
    result = run_system("grpo-tui", work, shapes.qwen3_model(shape, layers), data, BENCH / "logs", timeout, **extra)
    if "error" in result:
        return {"error": result["error"]}
    s = summarise(result, warmup)
    # The peak over every step, warm-up included: memory is a high-water mark.
    peak = max(step["peak_memory_mb"] for step in result["steps"])
    cpu = [step["training_cpu_s"] for step in result["steps"][warmup:] if step.get("training_cpu_s") is not None]
    return {"peak_gib": peak / GIB, "rss_gib": s["max_rss_mb"] / GIB, "s": s["s"], "training_s": s["training_s"],
            "training_cpu_s": sum(cpu) / len(cpu) if cpu else float("nan")}


def _line(layers: int | str, finetune: str, mode: str, row: dict, base: dict | None) -> str:
    if "error" in row:
        return f"{layers:>6} {finetune:<5} {mode:<9} failed: {row['error']}"
    ratio = f"{row['training_s'] / base['training_s']:.2f}×" if base and "error" not in base and mode != "default" else ""
    return (f"{layers:>6} {finetune:<5} {mode:<9} {row['peak_gib']:>9.2f} {row['rss_gib']:>9.2f} {row['s']:>8.2f} "
            f"{row['training_s']:>10.2f} {row['training_cpu_s']:>12.2f} {ratio:>13}")


def full_depth(results: dict, shape: str, depths: list[int], full: int) -> list[dict]:
    """The full-depth row of every (fine-tune, mode) whose depths all ran: measured or extrapolated."""
    out = []
    for (finetune, mode), rows in results.items():
        if any("error" in r for r in rows.values()) or (full not in rows and len(rows) < 2):
            continue
        out.append({"shape": shape, "finetune": finetune, "mode": mode, **extrapolate(rows, depths, full)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=list(shapes.QWEN3_SHAPES), default="0.6b", help="the Qwen3 shape")
    parser.add_argument("--layers", help="comma-separated depths (default: " +
                        ", ".join(f"{k}: {v}" for k, v in DEPTHS.items()) + ")")
    parser.add_argument("--finetune", default="full,lora", help="full, lora or both")
    parser.add_argument("--switches", type=json.loads, default=SWITCHES, help="the [training] keys of the memory mode")
    parser.add_argument("--modes", default="default,switches", help="default, switches or both")
    parser.add_argument("--steps", type=int, default=1, help="measured steps")
    parser.add_argument("--warmup", type=int, default=0, help="steps before them (the switches change only the "
                        "training phase, which traces nothing: its first step is a steady one)")
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "data" / "arith.jsonl")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    depths = sorted(int(d) for d in (args.layers or DEPTHS[args.shape]).split(","))
    full = shapes.QWEN3_SHAPES[args.shape][1]["num_hidden_layers"]
    (BENCH / "logs").mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    lines = [
        f"bench/memory.py {' '.join(argv if argv is not None else sys.argv[1:])} — {started}",
        f"1 prompt × G={MEMORY_PROBE['group_size']} × {MEMORY_PROBE['max_completion_length']} tokens, "
        f"{args.shape} shape ({full} layers), float32, AdamW state allocated; switches: {json.dumps(args.switches)}; "
        f"LoRA: {json.dumps(LORA)}",
        f"{'layers':>6} {'tune':<5} {'mode':<9} {'peak GiB':>9} {'RSS GiB':>9} {'s/step':>8} {'training s':>10} {'training CPU':>12} {'train vs dflt':>13}",
    ]
    print("\n".join(lines), flush=True)
    results: dict = {}
    for finetune in [f.strip() for f in args.finetune.split(",")]:
        for mode in [m.strip() for m in args.modes.split(",")]:
            for layers in depths:
                row = measure(args.shape, layers, finetune, mode, args.switches, args.steps, args.warmup, args.data,
                              args.timeout)
                results.setdefault((finetune, mode), {})[layers] = row
                base = results.get((finetune, "default"), {}).get(layers)
                lines.append(_line(layers, finetune, mode, row, base))
                print(lines[-1], flush=True)
    full_rows = full_depth(results, args.shape, depths, full)
    printed = len(lines)
    for row in full_rows:
        if row["from"] is not None:
            base = next((r for r in full_rows if r["finetune"] == row["finetune"] and r["mode"] == "default"), None)
            lines.append(_line(f"~{full}", row["finetune"], row["mode"], row, base)
                         + "  (extrapolated from {} and {} layers)".format(*row["from"]))
            continue
        shallow = [d for d in depths if d != full]
        if len(shallow) >= 2:  # measured at full depth: the straight line from the shallow depths, as a check
            check = extrapolate({d: results[(row["finetune"], row["mode"])][d] for d in shallow}, shallow, full)
            lines.append(_line(f"~{full}", row["finetune"], row["mode"], check, None)
                         + "  (extrapolated from {} and {} layers, to check the line)".format(*check["from"]))
    if full_rows:
        lines += [""] + table(full_rows)
    print("\n".join(lines[printed:]), flush=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    (BENCH / f"memory-{stamp}.txt").write_text("\n".join(lines) + "\n")
    measured = [{"shape": args.shape, "finetune": f, "mode": m, "layers": n, **row}
                for (f, m), rows in results.items() for n, row in rows.items()]
    record = {"command": lines[0], "switches": args.switches, "lora": LORA, "rows": measured, "full": full_rows}
    (BENCH / f"memory-{stamp}.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

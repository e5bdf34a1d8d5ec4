"""The full-depth figures of ``bench/memory.py`` and which machines they fit.

    .venv/bin/python bench/memory_table.py                  # every .bench/memory-*.json, latest row wins
    .venv/bin/python bench/memory_table.py .bench/memory-20261201-1100*.json

Each ``bench/memory.py`` run saves its rows as JSON beside its text; one run holds one shape (a run
stays under the shared machine's 15-minute turn), so the table of every shape × fine-tune × mode is
put together here from the latest run of each. A configuration fits a machine when both its peak MLX
memory and the process's peak resident memory are at most the machine's size (resident memory is
what gets a process killed; on a Mac the OS and other apps keep a few GB of it, so read a fit within
~3 GiB of the size as tight).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import shapes  # noqa: E402

FIGURES = ("peak_gib", "rss_gib", "s", "training_s", "training_cpu_s")
MACHINES_GIB = (16, 24)


def extrapolate(rows: dict[int, dict], depths: list[int], full: int) -> dict:
    """Each figure at ``full`` layers from a straight line through the two shallowest depths (or the
    measured row itself when ``full`` is one of the depths)."""
    if full in rows:
        return {**rows[full], "layers": full, "from": None}
    low, high = depths[0], depths[1]
    out: dict = {"layers": full, "from": [low, high]}
    for key in FIGURES:
        slope = (rows[high][key] - rows[low][key]) / (high - low)
        out[key] = rows[low][key] + slope * (full - low)
    return out


def state_gib(shape: str, finetune: str) -> float:
    """The float32 state a step cannot do without at full depth: weights, gradients and AdamW's two
    moments (16 bytes a parameter) for full fine-tuning; the frozen weights (4 bytes) for LoRA."""
    params = shapes.param_count(shapes.QWEN3_SHAPES[shape][1])
    return params * (16 if finetune == "full" else 4) / 2**30


def how(row: dict) -> str:
    return "measured" if row["from"] is None else "extrapolated from {} and {} layers".format(*row["from"])


def fits(row: dict, machine_gib: float) -> bool:
    return max(row["peak_gib"], row["rss_gib"]) <= machine_gib


def table(full_rows: list[dict]) -> list[str]:
    """A Markdown table of full-depth rows (each with shape, finetune, mode and the figures)."""
    lines = [
        "| shape | fine-tune | mode | state GiB | peak MLX GiB | peak RSS GiB | how | "
        + " | ".join(f"fits {m} GiB" for m in MACHINES_GIB) + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(MACHINES_GIB),
    ]
    order = {name: i for i, name in enumerate(shapes.QWEN3_SHAPES)}
    for row in sorted(full_rows, key=lambda r: (order[r["shape"]], r["finetune"], r["mode"])):
        layers = shapes.QWEN3_SHAPES[row["shape"]][1]["num_hidden_layers"]
        lines.append(
            f"| {row['shape']} ({layers} layers) | {row['finetune']} | {row['mode']} | "
            f"{state_gib(row['shape'], row['finetune']):.1f} | {row['peak_gib']:.1f} | {row['rss_gib']:.1f} | "
            f"{how(row)} | " + " | ".join("yes" if fits(row, m) else "no" for m in MACHINES_GIB) + " |"
        )
    return lines


def largest(full_rows: list[dict]) -> list[str]:
    """One sentence per machine size and fine-tune: the largest shape that fits, and with which mode."""
    out = []
    for machine in MACHINES_GIB:
        for finetune in ("full", "lora"):
            best = None
            for shape in shapes.QWEN3_SHAPES:  # smallest to largest
                modes = [r["mode"] for r in full_rows
                         if r["shape"] == shape and r["finetune"] == finetune and fits(r, machine)]
                if modes:
                    best = f"{shape} ({' or '.join(sorted(modes))})"
            out.append(f"{machine} GiB, {finetune}: {best or 'none of the shapes'}")
    return out


def latest(paths: list[Path]) -> list[dict]:
    """The full-depth rows of the given ``bench/memory.py`` JSON files, the newest per configuration;
    a measured row wins over any extrapolated one."""
    chosen: dict[tuple, dict] = {}
    for path in sorted(paths):  # names are time stamps: later files win
        for row in json.loads(path.read_text())["full"]:
            key = (row["shape"], row["finetune"], row["mode"])
            if key not in chosen or row["from"] is None or chosen[key]["from"] is not None:
                chosen[key] = row
    return list(chosen.values())


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / ".bench").glob("memory-*.json"))
    rows = latest(paths)
    if not rows:
        print("no bench/memory.py results found (run bench/memory.py first)", file=sys.stderr)
        return 1
    print("\n".join(table(rows) + [""] + largest(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

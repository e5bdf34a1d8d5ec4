"""A screenshot of the dashboard showing a finished real run: its ``run.jsonl`` (every event the
worker sent) replayed into the dashboard as if the worker were sending it now.

    python screenshots/real_run.py CONFIG.toml RUN_DIR OUT.svg [--tab charts] [--png]

Used for the SmolLM2 demo's eval curve in the README (docs/gguf.md).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

REPLAY = ("import sys, time; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read()); sys.stdout.flush(); "
          "time.sleep(3600)")


async def shoot(config_path: Path, run_dir: Path, out: Path, tab: str | None, size: tuple[int, int]) -> Path:
    from grpo_tui.protocol.config import load_config
    from grpo_tui.tui.app import GrpoApp

    config = load_config(config_path)
    events = run_dir / "run.jsonl"
    steps = sum(1 for line in events.read_text().splitlines() if '"type":"step"' in line)
    app = GrpoApp(str(config_path), config, worker_argv=[sys.executable, "-c", REPLAY, str(events)])
    async with app.run_test(size=size) as pilot:
        for _ in range(200):
            await pilot.pause(0.1)
            if app.state.step >= steps:
                break
        if tab:
            await pilot.press({"charts": "9"}.get(tab, tab))
        await pilot.pause(1.0)
        app.save_screenshot(filename=out.name, path=str(out.parent))
    from grpo_tui.tui.launcher import end_started

    end_started()  # the replaying run outlives its dashboard: end it
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tab", default=None, help="a key that shows a tab (e.g. the Charts tab's)")
    parser.add_argument("--png", action="store_true")
    args = parser.parse_args()
    path = asyncio.run(shoot(args.config, args.run_dir, args.out.resolve(), args.tab, (160, 48)))
    if args.png:
        import cairosvg

        cairosvg.svg2png(url=str(path), write_to=str(path.with_suffix(".png")), output_width=1600)
    print(path)


if __name__ == "__main__":
    main()

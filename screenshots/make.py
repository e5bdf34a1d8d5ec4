"""Regenerate the dashboard screenshots (SVG) from the scripted fake worker.

    python screenshots/make.py [--png]

Each state is the one the snapshot tests pin (tests/tui/scenarios.py). ``--png`` also writes
PNGs next to them when cairosvg is installed (handy for looking at them outside a browser).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.tui.* lives in the repository, not the package

from tests.tui.conftest import build_app  # noqa: E402
from tests.tui.scenarios import SCENARIOS  # noqa: E402

SHOTS = ("running", "paused", "sample_detail", "group_view", "help", "crash_countdown", "zero_std", "eval_curve")
SIZE = (160, 48)


async def shoot(name: str, png: bool) -> Path:
    scenario = SCENARIOS[name]
    with tempfile.TemporaryDirectory() as folder:
        app = build_app(Path(folder), *scenario.options, **scenario.config)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            await scenario.prepare(pilot)
            path = HERE / f"dashboard-{name.replace('_', '-')}.svg"
            app.save_screenshot(filename=path.name, path=str(HERE))
    if png:
        import cairosvg

        cairosvg.svg2png(url=str(path), write_to=str(path.with_suffix(".png")), output_width=1600)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--png", action="store_true", help="also write PNGs (needs cairosvg)")
    parser.add_argument("names", nargs="*", default=list(SHOTS), help=f"states to shoot: {', '.join(SHOTS)}")
    args = parser.parse_args()
    for name in args.names:
        print(asyncio.run(shoot(name, args.png)).relative_to(HERE.parent))


if __name__ == "__main__":
    main()

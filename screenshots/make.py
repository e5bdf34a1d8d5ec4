"""Regenerate the dashboard screenshots (SVG) from the scripted fake worker.

    python screenshots/make.py [--png]

Each state is the one the snapshot tests pin (tests/tui/scenarios.py). ``--png`` also writes
PNGs next to them with cairosvg or rsvg-convert (handy for looking at them outside a browser;
rsvg draws braille from a proportional fallback font, so chart lines look dotted; each glyph is
pinned to its cell first, so none runs past its pane).
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.tui.* lives in the repository, not the package

from grpo_tui.tui.launcher import end_started  # noqa: E402
from tests.tui import sized_scenarios as sized  # noqa: E402
from tests.tui.conftest import build_app  # noqa: E402
from tests.tui.scenarios import SCENARIOS  # noqa: E402

SHOTS = ("running", "paused", "sample_detail", "group_view", "help", "crash_countdown", "zero_std", "eval_curve",
         "agent_sample_detail", "compared", "doctor", "curriculum", "asynchronous")
SIZE = (160, 48)
# (file name, state in tests/tui/sized_scenarios.py, terminal size): the layouts by width
SIZED_SHOTS = (
    ("dashboard-charts", sized.charts, (200, 50)),
    ("dashboard-chart-zoomed", sized.chart_zoomed, (160, 48)),
    ("dashboard-database", sized.database, (200, 50)),
    ("dashboard-database-maximized", sized.database_maximized, (200, 50)),
    ("dashboard-80x24", sized.running, (80, 24)),
    ("dashboard-120x40", sized.running, (120, 40)),
)


async def shoot(name: str, png: bool) -> Path:
    """One state: a name from SHOTS (160x48) or a file name from SIZED_SHOTS."""
    sized_shot = next((s for s in SIZED_SHOTS if s[0] == name), None)
    scenario = SCENARIOS.get(name)
    with tempfile.TemporaryDirectory() as folder:
        if sized_shot is not None:
            sized.make_store(Path(folder))  # the Database tab's steps
            app = build_app(Path(folder), *sized.OPTIONS)
            prepare, size, path = sized_shot[1], sized_shot[2], HERE / f"{name}.svg"
        else:
            assert scenario is not None, f"no such state: {name}"
            app = build_app(Path(folder), *scenario.options, **scenario.config)  # type: ignore[arg-type]
            prepare, size, path = scenario.prepare, SIZE, HERE / f"dashboard-{name.replace('_', '-')}.svg"
        async with app.run_test(size=size) as pilot:
            await prepare(pilot)
            app.save_screenshot(filename=path.name, path=str(HERE))
        end_started()  # the run outlives its dashboard: end it before its folder goes
    if png:
        write_png(path)
    return path


# One <text> run of Textual's SVG: its cell-aligned start and width (textLength), and its characters.
_TEXT_RUN = re.compile(r'(<text [^>]*?x=")([0-9.]+)(" y="[0-9.]+" textLength=")([0-9.]+)("[^>]*>)([^<]*)(</text>)')


def pinned_to_cells(svg: str) -> str:
    """``svg`` with each run of box, block or braille characters split into one <text> per cell.
    A converter that ignores textLength draws such a run in its fallback font's wider glyphs, so a
    chart line or an empty sparkline would seem to run past its pane; a glyph per cell cannot."""
    def split(match: re.Match[str]) -> str:
        head, x, mid, length, tail, body, end = match.groups()
        chars = html.unescape(body)
        if len(chars) < 2 or all(ord(c) < 0x2500 for c in chars):
            return match.group(0)
        cell = float(length) / len(chars)
        return "".join(f"{head}{float(x) + i * cell:.1f}{mid}{cell:.1f}{tail}{html.escape(c)}{end}"
                       for i, c in enumerate(chars))
    return _TEXT_RUN.sub(split, svg)


def write_png(svg: Path) -> Path:
    """A PNG beside ``svg`` (cairosvg, or librsvg's rsvg-convert: apt-get install librsvg2-bin)."""
    out = svg.with_suffix(".png")
    with tempfile.NamedTemporaryFile("w", suffix=".svg", encoding="utf-8") as pinned:
        pinned.write(pinned_to_cells(svg.read_text(encoding="utf-8")))
        pinned.flush()
        try:
            import cairosvg
        except ImportError:
            subprocess.run(["rsvg-convert", pinned.name, "-w", "1600", "-o", str(out)], check=True)
        else:
            cairosvg.svg2png(url=pinned.name, write_to=str(out), output_width=1600)
    return out


def main() -> None:
    os.environ["TZ"] = "UTC"  # the Database tab shows local times
    time.tzset()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--png", action="store_true", help="also write PNGs (needs cairosvg)")
    names = [*SHOTS, *(s[0] for s in SIZED_SHOTS)]
    parser.add_argument("names", nargs="*", default=names, help=f"states to shoot: {', '.join(names)}")
    args = parser.parse_args()
    for name in args.names:
        print(asyncio.run(shoot(name, args.png)).relative_to(HERE.parent))


if __name__ == "__main__":
    main()

"""The docs say what the screen shows: the keys the dashboard binds are the keys its help (``?``) and the README list (one key added to the
screen and not to them fails here), and the quickstart names its chart's colours."""

from __future__ import annotations

import re

from grpo_tui.tui.keys import DASHBOARD_KEYS
from grpo_tui.tui.screens.help import KEYS
from grpo_tui.tui.views import VIEW_TITLES, VIEWS

SHOWN = {"question_mark": "?", "left_square_bracket": "[", "right_square_bracket": "]"}
SAID_TOGETHER = {"shift+tab"}  # the help's "tab" line goes both ways


def test_the_help_lists_every_dashboard_key(root):
    listed = " ".join(key for key, _ in KEYS)
    numbers = f"1-{len(VIEWS)}"
    missing = []
    for binding in DASHBOARD_KEYS:
        for key in binding.key.split(","):
            if key in SAID_TOGETHER or (key.isdigit() and numbers in listed):
                continue
            if not re.search(rf"(^|[\s/]){re.escape(SHOWN.get(key, key))}($|[\s/])", listed):
                missing.append(key)
    assert not missing, f"keys the dashboard binds that ? does not list: {missing}"


def test_the_readme_names_every_tab_and_its_number_key(root):
    keys = (root / "README.md").read_text().split("Keys: ", 1)[1].split("\n\n", 1)[0]
    titles = ", ".join(VIEW_TITLES[v] for v in VIEWS)
    assert f"`1`-`{len(VIEWS)}` / `tab` switch tabs ({titles})" in " ".join(keys.split())


def test_the_quickstart_names_the_eval_curves_colour(root):
    """The main chart draws the reward, then each evaluation's series, in LINE_COLORS order."""
    from grpo_tui.tui.plot import LINE_COLORS

    said = re.search(r"the chart's (\w+) curve \(reward (\w+), loss (\w+)\)", (root / "examples" / "quickstart.toml").read_text())
    assert said is not None
    eval_colour, reward_colour, loss_colour = said.groups()
    assert eval_colour in LINE_COLORS[1] and reward_colour in LINE_COLORS[0] and loss_colour in LINE_COLORS[2]

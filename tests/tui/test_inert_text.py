"""Model output is shown literally: no escapes reach the terminal, no markup is applied."""

import pytest
from rich.console import Console
from rich.text import Text

from grpo_tui.tui.inert_text import REPLACEMENT, clean, inert


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("plain text", "plain text"),
        ("\x1b[31mred\x1b[0m", f"{REPLACEMENT}red{REPLACEMENT}"),  # CSI colour
        ("\x1b[2J\x1b[H", REPLACEMENT * 2),  # clear screen, cursor home
        ("\x1b]0;pwned\x07after", f"{REPLACEMENT}after"),  # OSC title, BEL-terminated
        ("\x1b]8;;http://x\x1b\\link", f"{REPLACEMENT}link"),  # OSC 8 hyperlink, ST-terminated
        ("ding\x07", f"ding{REPLACEMENT}"),  # BEL
        ("ab\bc", f"ab{REPLACEMENT}c"),  # backspace
        ("over\rwrite", f"over{REPLACEMENT}write"),  # lone CR would overwrite the line
        ("line\r\nnext", "line\nnext"),  # CRLF is just a newline
        ("tab\tand\nnewline", "tab\tand\nnewline"),
        ("\x9b31m8-bit", f"{REPLACEMENT}8-bit"),  # 8-bit CSI
        ("nul\x00del\x7f", f"nul{REPLACEMENT}del{REPLACEMENT}"),
        ("[bold]x[/bold] [link=http://e]y[/link]", "[bold]x[/bold] [link=http://e]y[/link]"),
        (None, ""),
    ],
)
def test_clean(raw, expected):
    assert clean(raw) == expected


def test_single_line_keeps_a_row_one_row():
    assert clean("a\nb\tc", single_line=True) == "a ⏎ b c"


def test_inert_text_prints_markup_literally_and_no_escape():
    text = inert("[bold red]hi[/] \x1b[5mblink :smile:", limit=None)
    assert isinstance(text, Text) and not text.spans
    console = Console(record=True, width=80, color_system="truecolor", force_terminal=True)
    console.print(text)
    out = console.export_text(styles=False)
    assert "[bold red]hi[/]" in out and ":smile:" in out
    assert "\x1b[5m" not in console.export_text(styles=True)


def test_inert_truncates_with_an_ellipsis():
    assert inert("abcdefgh", limit=5).plain == "abcd…"

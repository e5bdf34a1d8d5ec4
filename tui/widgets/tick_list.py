"""A ``SelectionList`` whose boxes differ without colour: a ticked row's box holds ``X``, an unticked
row's box is empty (Textual draws ``X`` in both and tells them apart by colour alone, which a
monochrome terminal, a screen reader or a copied screen loses)."""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import SelectionList
from textual.widgets._toggle_button import ToggleButton
from textual.widgets.option_list import OptionDoesNotExist


class TickList(SelectionList[Any]):
    def render_line(self, y: int) -> Strip:
        line = super().render_line(y)
        try:
            selection = self.get_option_at_index(self.scroll_offset.y + y)
        except OptionDoesNotExist:
            return line
        if selection.value in self._selected:
            return line
        segments = list(line)
        for i, segment in enumerate(segments[:3]):
            if segment.text == ToggleButton.BUTTON_INNER:
                segments[i] = Segment(" " * len(segment.text), segment.style, segment.control)
                return Strip(segments, line.cell_length)
        return line

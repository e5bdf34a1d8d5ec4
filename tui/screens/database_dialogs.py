"""The Database view's dialogs, pushed by whoever hosts the view (``grpo-tui browse``'s app, the
dashboard's screen): the view only says what it wants (``database_view.ExportRequested``,
``database_view.CompareRequested``), as Harlequin's widgets post messages up and the app pushes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the view is made when its tab is first shown: importing it here would undo that
    from grpo_tui.tui.widgets.database_view import CompareRequested, ExportRequested


class HostsDatabaseDialogs:
    """Mixed into an App or a Screen that contains a ``DatabaseView``."""

    def on_database_view_export_requested(self, message: ExportRequested) -> None:
        from grpo_tui.tui.screens.export_dialog import ExportDialog

        message.stop()
        message.view.app.push_screen(ExportDialog(message.store_path, message.filter, message.default_name))

    def on_database_view_compare_requested(self, message: CompareRequested) -> None:
        from grpo_tui.tui.screens.database_compare import DatabaseCompareScreen

        message.stop()
        message.view.app.push_screen(DatabaseCompareScreen(message.store, message.first_run))

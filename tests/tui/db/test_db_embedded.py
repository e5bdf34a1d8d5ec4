"""The Database view as a tab among others, the way the dashboard holds it."""

from textual.app import App, ComposeResult
from textual.widgets import Input, Static, TabbedContent, TabPane

from grpo_tui.tui.widgets.database_steps_table import DatabaseStepsTable
from grpo_tui.tui.widgets.database_view import DatabaseView

from tests.helpers.pilot import settle

SIZE = (150, 45)  # as the browse app's tests


class TabsApp(App):
    def compose(self) -> ComposeResult:
        with TabbedContent(initial="other"):
            with TabPane("Other", id="other"):
                yield Input(id="elsewhere")
            with TabPane("Database", id="database"):
                yield DatabaseView(id="database-view")


async def test_store_announced_later_opens_the_run_without_stealing_focus(store_path):
    app = TabsApp()
    async with app.run_test(size=SIZE) as pilot:
        view = app.query_one(DatabaseView)
        assert "No run store yet" in str(view.query_one("#db-status", Static).render())
        app.query_one("#elsewhere", Input).focus()
        view.set_store(str(store_path), 2)  # what the dashboard does on database_path
        await settle(pilot)
        assert app.focused.id == "elsewhere"  # the user was typing in another tab
        app.query_one(TabbedContent).active = "database"  # a hidden tab opens its store when shown
        await settle(pilot)
        assert view.is_on_screen
        assert view.level == "steps" and view.run_row.name == "gsm8k-lora"
        assert len(view.query_one(DatabaseStepsTable).rows_data) == 4
        view.action_all_generations()
        await settle(pilot)
        assert view.level == "generations"
        view.set_store(str(store_path), 2)  # announced again (e.g. after a restart): nothing resets
        await settle(pilot)
        assert view.level == "generations"


async def test_missing_store_is_a_message_not_a_crash(tmp_path):
    app = TabsApp()
    async with app.run_test(size=SIZE) as pilot:
        view = app.query_one(DatabaseView)
        view.set_store(str(tmp_path / "not-yet.db"), 1)
        app.query_one(TabbedContent).active = "database"
        await settle(pilot)
        assert "no such file" in str(view.query_one("#db-status", Static).render())
        assert view.reader.store is None

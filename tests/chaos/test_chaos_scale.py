"""The scale switch the scenarios size themselves by."""

from tests.fixtures.chaos import ChaosFigures, ChaosScale


def test_a_scale_picks_the_short_size_unless_full() -> None:
    assert ChaosScale(full=False).pick(10, 1000) == 10
    assert ChaosScale(full=True).pick(10, 1000) == 1000


def test_figures_print_as_one_markdown_table_row_each() -> None:
    figures = ChaosFigures()
    figures.record("wakes under faults", "volumes with two billing pods", 0, "0")
    figures.record("wakes under faults", "wakes per second", 12.3456)
    table = figures.table(ChaosScale(full=True))
    assert "| wakes under faults | volumes with two billing pods | 0 | 0 |" in table
    assert "| wakes under faults | wakes per second | 12.3 |  |" in table
    assert table.startswith("Chaos figures (full scale)")

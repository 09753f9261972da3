"""The long commands' one progress display: a line per item off a terminal (what a log keeps and
the stop-signal test counts), rich's bar on one."""

from __future__ import annotations

import io

from grader.course.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_each_item_is_one_line_naming_it():
    stream = io.StringIO()
    with Progress("feedback", 2, "pages", stream) as bar:
        bar.advance("ada/01_layer_norm")
        bar.advance("ben/01_layer_norm", "1 not recorded")
    assert stream.getvalue().splitlines() == [
        "feedback 1/2 pages (ada/01_layer_norm)",
        "feedback 2/2 pages, 1 not recorded (ben/01_layer_norm)",
    ]


def test_on_a_terminal_a_bar_ends_at_the_total():
    stream = Terminal()
    with Progress("autograde", 3, "notebooks", stream) as bar:
        for student in ("ada", "ben", "cyd"):
            bar.advance(f"{student}/01_layer_norm", "0 not recorded")
    shown = stream.getvalue()
    assert "autograde" in shown and "3/3" in shown and "(cyd/01_layer_norm)" in shown
    assert "autograde 1/3 notebooks" not in shown  # no log line: the bar is redrawn

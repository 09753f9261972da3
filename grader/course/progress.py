"""The one progress display of the long commands (`grader autograde`, `grader feedback`): rich's
bar on a terminal; elsewhere one line per item done, which a log keeps and a script can count."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress


class Progress:
    """`with Progress("feedback", total, "pages") as bar: bar.advance("ada/01_layer_norm")`."""

    def __init__(self, what: str, total: int, unit: str, stream: TextIO | None = None) -> None:
        self.what, self.total, self.unit, self.done = what, total, unit, 0
        self.stream = stream or sys.stderr
        self._bar: RichProgress | None = None

    def __enter__(self) -> Progress:
        if self.stream.isatty():
            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(f"{self.unit}{{task.fields[status]}}"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[label]}"),
                console=Console(file=self.stream),
            )
            self._bar.start()
            self._task = self._bar.add_task(self.what, total=self.total, status="", label="")
        return self

    def advance(self, label: str, status: str = "") -> None:
        """One more item done: `label` names it, `status` (e.g. "3 not recorded") sums up."""
        self.done += 1
        status = f", {status}" if status else ""
        if self._bar:
            self._bar.update(self._task, advance=1, status=status, label=f"({label})")
        else:
            line = f"{self.what} {self.done}/{self.total} {self.unit}{status} ({label})"
            print(line, file=self.stream, flush=True)

    def __exit__(
        self, kind: type | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._bar:
            self._bar.stop()

"""nbgrader's exchange as `grader serve` reads and writes it, through nbgrader's own classes.

A submission is a folder of the exchange's inbound, `EXCHANGE/COURSE_ID/inbound/
STUDENT+ASSIGNMENT+TIMESTAMP+RANDOM/`, written by `nbgrader submit` (or JupyterLab's
Assignment List). It is collected into the course's submitted/ as `nbgrader collect --update
--student` collects it, and its feedback released as `nbgrader release_feedback --student` does,
to `EXCHANGE/COURSE_ID/feedback/<hash>.html`, where `nbgrader fetch_feedback` finds it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.utils import notebook_hash, parse_utc
from traitlets.config import Config

SECRET = "submission_secret.txt"  # written last by `nbgrader submit`: the submission is whole
SECRET_LENGTH = 128  # secrets.token_hex(64), as nbgrader's submit writes it


@dataclass(frozen=True, order=True)
class HandIn:
    """One submission in the inbound, ordered by arrival (its timestamp, then its name)."""

    timestamp: datetime
    name: str  # the inbound folder's name: unique, the submission's key
    student: str
    assignment: str
    folder: Path

    @property
    def label(self) -> str:
        return f"{self.student}/{self.assignment} at {self.timestamp:%Y-%m-%d %H:%M:%S} UTC"

    def secret(self) -> str:
        return (self.folder / SECRET).read_text()


def inbound(config: Config) -> Path:
    return Path(config.Exchange.root) / config.CourseDirectory.course_id / "inbound"


def hand_ins(config: Config) -> list[HandIn]:
    """Every whole submission in the inbound, in order of arrival; a folder nbgrader's submit
    is still writing (no secret yet), or one whose name is not nbgrader's, is left for later."""
    try:
        entries = list(os.scandir(inbound(config)))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        parts = entry.name.rsplit("+", 3)  # as nbgrader's collect splits: ids may hold a '+'
        if len(parts) != 4 or not entry.is_dir(follow_symlinks=False):
            continue
        if not _whole(Path(entry.path)):
            continue
        try:
            stamp = parse_utc(parts[2])
        except ValueError:
            continue
        found.append(HandIn(stamp, entry.name, parts[0], parts[1], Path(entry.path)))
    return sorted(found)


def _whole(folder: Path) -> bool:
    try:
        return len((folder / SECRET).read_text()) >= SECRET_LENGTH
    except OSError:
        return False


def _coursedir(config: Config, student: str, assignment: str) -> CourseDirectory:
    coursedir = CourseDirectory(config=config)
    coursedir.student_id, coursedir.assignment_id = student, assignment
    return coursedir


class _CollectOne(ExchangeCollect):
    """nbgrader's collect of the one submission named, not of the student's latest."""

    def __init__(self, hand_in: HandIn, **kwargs) -> None:
        super().__init__(**kwargs)
        self.hand_in = hand_in

    def init_src(self) -> None:
        self.inbound_path = str(self.hand_in.folder.parent)
        self.src_records = [self._path_to_record(str(self.hand_in.folder))]


def collect(config: Config, hand_in: HandIn) -> None:
    """Copy the submission into the course's submitted/<student>/<assignment>/, as
    `nbgrader collect --update --student STUDENT ASSIGNMENT` does (an older copy is replaced;
    a newer one already there is kept)."""
    coursedir = _coursedir(config, hand_in.student, hand_in.assignment)
    _CollectOne(
        hand_in,
        coursedir=coursedir,
        authenticator=Authenticator(config=config),
        config=config,
        update=True,
        check_owner=False,  # students on other machines submit as the exchange's owner
    ).start()


def release_feedback(config: Config, student: str, assignment: str) -> None:
    """Release the course's feedback/<student>/<assignment>/ pages, as `nbgrader
    release_feedback --student STUDENT ASSIGNMENT` does."""
    ExchangeReleaseFeedback(
        coursedir=_coursedir(config, student, assignment),
        authenticator=Authenticator(config=config),
        config=config,
    ).start()


def release_message(config: Config, hand_in: HandIn, html: str) -> None:
    """Give the student a page about this very submission (it was refused, or could not be
    graded yet) where `nbgrader fetch_feedback` looks for its feedback."""
    releaser = ExchangeReleaseFeedback(
        coursedir=_coursedir(config, hand_in.student, hand_in.assignment),
        authenticator=Authenticator(config=config),
        config=config,
    )
    releaser.init_dest()  # the exchange's feedback/ folder, made with nbgrader's modes
    checksum = notebook_hash(secret=hand_in.secret(), notebook_id=hand_in.assignment)
    page = Path(releaser.dest_path) / f"{checksum}.html"
    partial = page.with_name(f"{checksum}-tmp.html")
    partial.write_text(html)
    os.replace(partial, page)

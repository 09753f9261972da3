"""What the grader reads from a student-writable place: no link followed at any step below the
trusted folder, nothing but a regular file, never more than the cap."""

from __future__ import annotations

import os
import threading
from pathlib import Path, PurePath

import pytest

from grader.course.untrusted import UnsafeFile, read_below

NOTEBOOK = PurePath("ann", "01", "01.ipynb")


@pytest.fixture
def root(tmp_path) -> Path:
    (tmp_path / "ann" / "01").mkdir(parents=True)
    (tmp_path / NOTEBOOK).write_text("ann's")
    (tmp_path / "bob" / "01").mkdir(parents=True)
    (tmp_path / "bob" / "01" / "01.ipynb").write_text("bob's")
    return tmp_path


def test_a_regular_file_is_read(root):
    assert read_below(root, NOTEBOOK, 100) == b"ann's"


def test_the_trusted_folder_itself_may_be_reached_through_a_link(root, tmp_path_factory):
    link = tmp_path_factory.mktemp("elsewhere") / "submissions"
    link.symlink_to(root)
    assert read_below(link, NOTEBOOK, 100) == b"ann's"


@pytest.mark.parametrize(
    ("step", "target"),
    [
        (PurePath("mal"), "bob"),
        (PurePath("mal", "01"), "../bob/01"),
        (PurePath("mal", "01", "01.ipynb"), "../../bob/01/01.ipynb"),
    ],
)
def test_a_link_at_any_step_is_refused_naming_it(root, step, target):
    for folder in reversed(step.parents[:-1]):
        (root / folder).mkdir()
    (root / step).symlink_to(target)
    with pytest.raises(UnsafeFile, match=f"{step} is a symbolic link"):
        read_below(root, PurePath("mal", "01", "01.ipynb"), 100)


def test_a_fifo_is_refused_without_waiting_for_a_writer(root):
    fifo = PurePath("ann", "01", "fifo.ipynb")
    os.mkfifo(root / fifo)
    result = []
    reader = threading.Thread(target=lambda: result.append(_refusal(root, fifo)), daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert result == [f"{fifo} is not a regular file (refused)"]


def test_a_sparse_file_beyond_the_cap_is_refused_unread(root):
    sparse = root / "ann" / "01" / "sparse.ipynb"
    with sparse.open("wb") as file:
        file.truncate(1 << 40)  # a terabyte of nothing: reading it whole would fill memory
    with pytest.raises(UnsafeFile, match="larger than 20 MB"):
        read_below(root, PurePath("ann", "01", "sparse.ipynb"), 20 << 20)


def test_a_missing_step_is_missing(root):
    with pytest.raises(FileNotFoundError):
        read_below(root, PurePath("cyd", "01", "01.ipynb"), 100)


def _refusal(root: Path, relative: PurePath) -> str:
    try:
        read_below(root, relative, 100)
    except UnsafeFile as refused:
        return str(refused)
    return "read"

"""The repository stands alone: what it cites is in the repository or public."""

import re
import subprocess

from grader.config import REPO

# Notes that lived beside the repository while it was written; nobody who clones it has them.
OUTSIDE_NOTES = re.compile(r"[.][.]/shared|shared[/]reference|measured-notes[.]md|content[.]md")


def tracked_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return listing.stdout.splitlines()


def test_nothing_cites_notes_outside_the_repository():
    citing = [
        name
        for name in tracked_files()
        if (REPO / name).is_file()
        and OUTSIDE_NOTES.search((REPO / name).read_text(errors="replace"))
    ]
    assert citing == [], f"these files cite notes that are not in the repository: {citing}"

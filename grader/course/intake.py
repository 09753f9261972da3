"""Reading exercises out of notebooks: which exercises a notebook holds, and a student's answers.

A submission is read once (`Submission.read`) into what grading needs (each exercise's answer)
and what nbgrader records (the same notebook, its stripped nbgrader tags restored on the very
cells graded). The cell conventions are grader.course's.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePath

import bleach
import nbformat

from grader.course import (
    SETUP_ID,
    answer_cell,
    grade_id,
    grade_id_of_tests,
    is_solution,
    is_test_cell,
    nbgrader_metadata,
    notebook_path,
    set_nbgrader_metadata,
)
from grader.course.config import SOLUTIONS
from grader.course.untrusted import read_below

MAX_NOTEBOOK_BYTES = 20 << 20  # a course notebook with its plots is well under 1 MB


def source_notebook(assignment: str, folder: Path = SOLUTIONS) -> nbformat.NotebookNode:
    """`assignment`'s notebook in `folder` (default: the checkout's course source)."""
    return nbformat.read(notebook_path(folder, assignment), as_version=4)


def exercises_of(notebook: nbformat.NotebookNode) -> list[str]:
    """The graded exercises of a (source) notebook, in order: the cells with a test cell of
    their own."""
    tests = {grade_id(c) for c in notebook.cells if is_test_cell(c)}
    return [grade_id(c) for c in notebook.cells if grade_id_of_tests(grade_id(c)) in tests]


def setup_code(notebook: nbformat.NotebookNode) -> str:
    """The locked imports cell every answer may rely on (taken from the source, not the student)."""
    return "\n".join(c.source for c in notebook.cells if grade_id(c) == SETUP_ID)


def answer_source(notebook: nbformat.NotebookNode, name: str) -> str | None:
    """The student's answer to exercise `name` (see grader.course.answer_cell), or None."""
    cell = answer_cell(notebook, name)
    return None if cell is None else cell.source


def submitted_bytes(path: Path) -> bytes:
    """The bytes of a notebook at <submissions>/<student>/<assignment>/<notebook>, nbgrader's
    layout. Those three steps are the student's: a link in any of them, a FIFO, a device or a
    file over MAX_NOTEBOOK_BYTES is refused (untrusted.UnsafeFile, a ValueError)."""
    return read_below(path.parents[2], PurePath(*path.parts[-3:]), MAX_NOTEBOOK_BYTES)


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """A submitted notebook (see submitted_bytes); raises ValueError with a plain reason when it
    cannot be read."""
    data = _submitted(path)
    if not isinstance(data, bytes):
        raise ValueError(_unreadable(path, data))
    return _parsed(path, data)


def _submitted(path: Path) -> bytes | OSError | ValueError:
    """The submission's bytes, or why they cannot be read."""
    try:
        return submitted_bytes(path)
    except (OSError, ValueError) as error:
        return error


def _unreadable(path: Path, error: OSError | ValueError) -> str:
    """Why the submission cannot be read, in plain words naming it."""
    if isinstance(error, FileNotFoundError):
        return f"{path.name} is missing"
    if isinstance(error, OSError):  # a folder that is a file, no permission
        return f"{path.name} cannot be opened ({error.strerror})"
    return str(error)  # untrusted.UnsafeFile: a link, a special or oversized file


def _parsed(path: Path, data: bytes) -> nbformat.NotebookNode:
    try:
        notebook = nbformat.reads(data.decode(), as_version=4)
        nbformat.writes(notebook).encode()  # a lone surrogate ("\ud800" in its JSON) cannot be
        return notebook  # staged for nbgrader: refused here, as the student's
    except Exception as error:  # invalid JSON or UTF-8, wrong schema, binary junk
        raise ValueError(
            f"{path.name} is not a readable notebook ({type(error).__name__})"
        ) from None


def fingerprint(path: Path, source: Path) -> str:
    """The hash of the submission at `path` and of the source notebook it is graded against (a
    changed answer key regrades); a missing or refused submission hashes as its reason."""
    return _fingerprint(_submitted(path), source)


def _fingerprint(data: bytes | OSError | ValueError, source: Path) -> str:
    if not isinstance(data, bytes):
        data = f"<{type(data).__name__}: {data}>".encode()
    return hashlib.sha256(data + source.read_bytes()).hexdigest()


@dataclass
class Submission:
    """One student's notebook for one assignment, read once.

    Attributes:
        exercises: the assignment's exercises, in the source's order.
        setup: the source's imports cell, run before each answer.
        answers: each exercise's answer cell's source (None: it has none).
        recorded: what nbgrader records: the notebook with its stripped tags restored on the
            cells graded, or None when it could not be read (`problem` says why).
        fingerprint: of the bytes read and of the source (see `fingerprint`).
    """

    path: Path
    assignment: str
    exercises: list[str]
    setup: str
    answers: dict[str, str | None]
    recorded: nbformat.NotebookNode | None
    problem: str
    fingerprint: str

    @classmethod
    def read(cls, path: Path, assignment: str, source: Path = SOLUTIONS) -> Submission:
        """The notebook at `path`, an answer to `assignment` of the course source in `source`."""
        source_path = notebook_path(source, assignment)
        original = nbformat.read(source_path, as_version=4)
        exercises = exercises_of(original)
        data = _submitted(path)
        notebook, problem = None, ""
        if not isinstance(data, bytes):
            problem = _unreadable(path, data)
        else:
            try:
                notebook = _parsed(path, data)
            except ValueError as error:
                problem = str(error)
        answers = dict.fromkeys(exercises)
        if notebook is not None:
            restore_metadata(notebook, original)
            untag_earlier_copies(notebook)
            answers = {name: answer_source(notebook, name) for name in exercises}
        digest = _fingerprint(data, source_path)
        return cls(
            path, assignment, exercises, setup_code(original), answers, notebook, problem, digest
        )


def restore_metadata(submitted: nbformat.NotebookNode, source: nbformat.NotebookNode) -> int:
    """Re-tag cells whose nbgrader metadata an editor stripped; returns how many were re-tagged.

    An answer cell is the one grading reads (grader.course.answer_cell), a locked cell is
    recognized by its unchanged text. Cells that cannot be recognized are left for nbgrader to
    add back.
    """
    present = {grade_id(c) for c in submitted.cells} - {""}
    restored = 0
    for cell in source.cells:
        if not grade_id(cell) or grade_id(cell) in present:
            continue
        match = _stripped(submitted, cell)
        if match is not None:
            set_nbgrader_metadata(match, nbgrader_metadata(cell))
            restored += 1
    return restored


def _stripped(submitted: nbformat.NotebookNode, cell: nbformat.NotebookNode):
    """The untagged cell of `submitted` that is the source's `cell`, or None: for an answer, the
    cell grading reads; for any other cell, the first with its text as the student saw it."""
    if is_solution(cell) and cell.cell_type == "code":
        found = answer_cell(submitted, grade_id(cell))
        return None if found is None or grade_id(found) else found
    visible = _visible_part(cell.source)
    untagged = (c for c in submitted.cells if not grade_id(c) and c.cell_type == cell.cell_type)
    return next((c for c in untagged if c.source.strip() == visible), None)


def untag_earlier_copies(notebook: nbformat.NotebookNode) -> int:
    """A cell copied in Jupyter keeps its nbgrader metadata, so a grade_id can appear twice,
    which nbgrader refuses to record. The last copy is the one graded (see answer_cell), so
    the earlier ones lose their tag; returns how many did."""
    last = {grade_id(c): c for c in notebook.cells if grade_id(c)}
    untagged = 0
    for cell in notebook.cells:
        if grade_id(cell) and last[grade_id(cell)] is not cell:
            set_nbgrader_metadata(cell, None)
            untagged += 1
    return untagged


def _visible_part(source: str) -> str:
    """A test cell as the student sees it: without its hidden region."""
    kept, hidden = [], False
    for line in source.splitlines():
        if "BEGIN HIDDEN TESTS" in line:
            hidden = True
        elif "END HIDDEN TESTS" in line:
            hidden = False
        elif not hidden:
            kept.append(line)
    return "\n".join(kept).strip()


# --- what the instructor's pages show of a submission: formatting, never live markup

# Markdown's HTML that formats and cannot run: no script, style, iframe, form or event handler.
SAFE_TAGS = frozenset(
    "a abbr b blockquote br code del div em h1 h2 h3 h4 h5 h6 hr i img kbd li ol p pre s span "
    "strong sub sup table tbody td th thead tr u ul".split()
)
SAFE_ATTRIBUTES = {"a": ["href", "title"], "img": ["src", "alt", "title"], "*": ["align"]}
SAFE_PROTOCOLS = frozenset({"http", "https", "mailto", "attachment"})
SAFE_OUTPUTS = frozenset({"text/plain", "image/png", "image/jpeg"})  # no HTML, SVG, JavaScript


KEPT_CLEAN_CHARS = 20_000  # a cleaned cell kept up to this long; 2048 kept: at most ~80 MB
# Code and math, which every renderer shows as text (escaped): left as written.
LITERAL = re.compile(r"(```.*?```|~~~.*?~~~|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$)", re.DOTALL)


def _inert_markdown(source: str) -> str:
    # A class hands in the release's markdown cells unchanged: each short one is cleaned once
    # per process (a long one, which a student may have made, is not kept).
    return _inert_short(source) if len(source) <= KEPT_CLEAN_CHARS else _inert(source)


@functools.lru_cache(maxsize=2048)
def _inert_short(source: str) -> str:
    return _inert(source)


def _inert(source: str) -> str:
    parts = LITERAL.split(source)  # text, literal, text, literal, ..., text
    for i in range(0, len(parts), 2):
        cleaned = bleach.clean(
            parts[i], tags=SAFE_TAGS, attributes=SAFE_ATTRIBUTES, protocols=SAFE_PROTOCOLS
        )
        # neither ">" nor "&" opens a tag: kept as written (markdown quotes need the first)
        parts[i] = cleaned.replace("&gt;", ">").replace("&amp;", "&")
    return "".join(parts)


def make_inert(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """`notebook` with nothing a student wrote live in a page that renders it (formgrader's, the
    feedback): markdown and raw cells keep only formatting HTML (the rest shown as text), outputs
    only text and bitmaps, attachments only bitmaps."""
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        if cell.cell_type in ("markdown", "raw"):
            cell.source = _inert_markdown(cell.source)
            for name, bundle in list(cell.get("attachments", {}).items()):
                cell.attachments[name] = {k: v for k, v in bundle.items() if k in SAFE_OUTPUTS}
        for output in cell.get("outputs", []):
            if "data" in output:
                output.data = {k: v for k, v in output.data.items() if k in SAFE_OUTPUTS}
    return notebook

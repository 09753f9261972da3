"""From the gradebook out: the grades CSV an LMS can import, HTML feedback, a score table."""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import nullcontext
from dataclasses import dataclass
from html import escape
from pathlib import Path

import nbformat
import nbgrader
from jinja2 import pass_context
from jupyter_core.paths import jupyter_config_dir
from latex2mathml.converter import convert as latex_to_mathml
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbformat import NotebookNode
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import ClearHiddenTests
from traitlets.config import Config

from grader.course import (
    EXCHANGE_FILES,
    Course,
    exercise_of_test,
    grade_id,
    is_test_cell,
    nbgrader_metadata,
)
from grader.course.config import assignments
from grader.course.progress import Progress
from grader.course.results import ExerciseResult, Results
from grader.gradebook.config import gradebook_url
from grader.gradebook.lms import EXPORTS
from grader.gradebook.records import cell_grades, grades_to_review

HIDDEN_REGION = re.compile(r"BEGIN HIDDEN TESTS|END HIDDEN TESTS|grade\(")


def scores(course: Course, students: list[str]) -> dict[str, dict[str, float]]:
    """Each student's score per assignment of the gradebook (the released ones), as nbgrader
    records it (0 if absent)."""
    table: dict[str, dict[str, float]] = {}
    with Gradebook(gradebook_url(course)) as gradebook:
        names = [a.name for a in gradebook.assignments]
        for student in students:
            row = {}
            for assignment in names:
                try:
                    row[assignment] = gradebook.find_submission(assignment, student).score
                except MissingEntry:
                    row[assignment] = 0.0
            table[student] = row
    return table


def max_scores(course: Course) -> dict[str, float]:
    """The points of each assignment of the gradebook."""
    with Gradebook(gradebook_url(course)) as gradebook:
        return {a.name: a.max_score for a in gradebook.assignments}


def write_csv(course: Course, path: Path, students: list[str] = ()) -> Path:
    """The gradebook as nbgrader's roster has it (`export_grades`): every student, or only
    `students`."""
    export_grades(course, path, students)
    return path


def export_grades(
    course: Course,
    path: Path,
    students: list[str] = (),
    assignments: list[str] = (),
    lms: str = "nbgrader",
    roster: Path | None = None,
) -> list[str]:
    """The gradebook as an LMS imports it (`grader.gradebook.lms.EXPORTS[lms]`): every
    student of the roster (nbgrader's, or the LMS's own `roster` file), or only `students`;
    every released assignment, or only `assignments`. Returns the gradebook's students left
    out because the LMS's roster lacks them."""
    export = EXPORTS[lms](to=str(path), student=list(students), assignment=list(assignments))
    if roster is not None:
        export.roster = str(roster)
    with Gradebook(gradebook_url(course)) as gradebook:
        export.export(gradebook)
    return getattr(export, "unmatched", [])


@dataclass(frozen=True)
class Page:
    """One student × notebook's feedback: the autograded notebook and its grades, as recorded."""

    student: str
    assignment: str
    notebook: Path  # autograded/<student>/<assignment>/<assignment>.ipynb
    folder: Path  # feedback/<student>/<assignment>/
    grades: dict[str, tuple[float, float]]  # grade_id -> (score, points): auto or a TA's
    reviews: dict[str, str]  # grade_id -> NOT_GRADED or STALE (records.grades_to_review)
    comments: dict[str, str]
    score: float
    max_score: float
    late_penalty: float
    results: Path  # the grader's results of the notebook (grader.course.results)

    def digest(self) -> str:
        """What the page is made from: when it is unchanged, so is the page."""
        made_of = json.dumps(
            [
                sorted(self.grades.items()),
                sorted(self.reviews.items()),
                sorted(self.comments.items()),
            ]
        )
        made_of += f"{self.score} {self.max_score} {self.late_penalty}"
        return hashlib.sha256(self.notebook.read_bytes() + made_of.encode()).hexdigest()

    @property
    def stamp(self) -> Path:
        return self.folder / f".{self.assignment}.sha256"


def feedback_pages(course: Course, students: list[str]) -> list[Page]:
    """Every student × notebook that was autograded, with its grades, read in one gradebook
    session (an assignment never graded has nothing to give feedback on)."""
    pages = []
    with Gradebook(gradebook_url(course)) as gradebook:
        for assignment in assignments():
            for student in students:
                notebook = course.autograded_notebook(student, assignment)
                if not notebook.is_file():
                    continue
                try:
                    record = gradebook.find_submission_notebook(assignment, assignment, student)
                except MissingEntry:
                    continue
                pages.append(
                    Page(
                        student,
                        assignment,
                        notebook,
                        course.feedback_folder(student, assignment),
                        cell_grades(record),
                        grades_to_review(record),
                        {c.name: c.comment or "" for c in record.comments},
                        record.score,
                        record.max_score,
                        record.late_submission_penalty or 0.0,
                        course.results_file(student, assignment),
                    )
                )
    return pages


def write_feedback(
    course: Course, students: list[str], jobs: int | None = None, progress: bool = False
) -> tuple[Path, list[str]]:
    """nbgrader's HTML feedback page per student × notebook, hidden tests removed, rendered
    from the recorded grades in `jobs` processes; a page whose notebook and grades are unchanged
    since it was written is kept. Returns the folder and, in plain words, each page that could
    not be made."""
    pages = [p for p in feedback_pages(course, students) if not _current(p)]
    problems = []
    bar = Progress("feedback", len(pages), "pages") if progress else nullcontext()
    # Fresh interpreters, not forks of this one: a fork copies this process's threads' locks and
    # runs libraries' after-fork hooks (kombu's waited forever on a Redis socket). Not a fork
    # server either: it would stay behind in this process, and its forks would inherit it.
    workers = jobs or os.cpu_count() or 1
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool, bar:
        futures = {pool.submit(render_page, page): page for page in pages}
        for future in as_completed(futures):
            page = futures[future]
            try:
                future.result()
            except Exception as error:  # one page never stops the others
                problems.append(f"{page.student}: no feedback for {page.assignment} ({error})")
            if progress:
                bar.advance(f"{page.student}/{page.assignment}")
    return course.feedback, problems


def _current(page: Page) -> bool:
    return page.stamp.is_file() and page.stamp.read_text() == page.digest()


NO_ALT = re.compile(r"<img(?![^>]*\balt=)")
MISSING_ALT = '<img alt="No description has been provided for this image"'
# nbgrader's page loads MathJax from a CDN: offline, its math would stay raw TeX. Ours is
# MathML (MathMLRenderer), and in MathJax's place goes our style: an output line as long as a
# diagnosis wraps in its box instead of running out of it.
MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
OUR_STYLE = "<style>div.output_area pre { white-space: pre-wrap; overflow-wrap: anywhere; }</style>"


class MathMLRenderer(IPythonRenderer):
    """nbconvert's Markdown renderer, with its math as MathML, which browsers typeset with
    nothing to load; TeX MathML cannot say stays as its text, in code."""

    def inline_math(self, body: str) -> str:
        return _mathml(body, "inline")

    def block_math(self, body: str) -> str:
        return _mathml(body, "block")

    def latex_environment(self, name: str, body: str) -> str:
        return _mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", "block")


def _mathml(tex: str, display: str) -> str:
    try:
        return latex_to_mathml(tex, display=display)
    except Exception:  # the library's many parse errors: any means the TeX is shown as text
        return f"<code>{escape(tex)}</code>"


class FeedbackExporter(HTMLExporter):
    """nbgrader's feedback exporter (configured as its `generate_feedback` configures it), less
    two costs per page that do not change what the student reads: code highlighting and
    markdown rendering are memoized (an assignment's cells are mostly the same for every
    student), and the page is not re-parsed with BeautifulSoup, whose only change to the
    classic feedback template is alt text on images, added here."""

    def __init__(self) -> None:
        formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
        config = Config()
        config.HTMLExporter.template_name = "course_feedback"  # nbgrader's "feedback", extended
        ours = Path(__file__).parent / "templates"
        config.HTMLExporter.extra_template_basedirs = [str(formgrader / "templates"), str(ours)]
        bootstrap = formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css"
        # formgrader's templates as a root too: ours extends 'feedback/index.html.j2'
        config.HTMLExporter.extra_template_paths = [str(bootstrap), str(formgrader / "templates")]
        super().__init__(config=config)
        self._markdown = functools.lru_cache(maxsize=4096)(self._markdown_of)

    def from_notebook_node(self, nb: NotebookNode, resources: dict | None = None, **kw):
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name", None))
        resources = self._init_resources(resources)
        self.register_filter("highlight_code", _highlighter(lexer))
        data_types = WidgetsDataTypeFilter(
            notebook_metadata=self._nb_metadata, parent=self, resources=resources
        )
        self.register_filter("filter_data_type", data_types)
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return MATHJAX.sub(OUR_STYLE, NO_ALT.sub(MISSING_ALT, html)), resources

    @pass_context
    def markdown2html(self, context, source: str) -> str:
        if context.get("cell", {}).get("attachments"):
            return self._render_markdown(context, source)
        return self._markdown(source)

    def _markdown_of(self, source: str) -> str:
        return self._render_markdown({}, source)

    def _render_markdown(self, context, source: str) -> str:
        """HTMLExporter.markdown2html's rendering, with MathMLRenderer."""
        renderer = MathMLRenderer(
            escape=False,
            attachments=context.get("cell", {}).get("attachments", {}),
            embed_images=self.embed_images,
            path=context.get("resources", {}).get("metadata", {}).get("path", ""),
            anchor_link_text=self.anchor_link_text,
            exclude_anchor_links=self.exclude_anchor_links,
            **self.lexer_options,
        )
        return MarkdownWithMath(renderer=renderer).render(source)


@functools.cache
def _highlighter(lexer: str | None):
    """Highlight2HTML for `lexer`, memoized on the source (a cell whose metadata names another
    language for its magics is highlighted afresh)."""
    highlight = Highlight2HTML(pygments_lexer=lexer)
    memoized = functools.lru_cache(maxsize=4096)(highlight)

    def highlight_code(source: str, language: str | None = None, metadata=None) -> str:
        if metadata and metadata.get("magics_language"):
            return highlight(source, language, metadata)
        return memoized(source, language)

    return highlight_code


_exporter: FeedbackExporter | None = None  # one per worker process: its templates load once


def _html_exporter() -> FeedbackExporter:
    global _exporter
    if _exporter is None:
        _exporter = FeedbackExporter()
    return _exporter


def render_page(page: Page, visible_only: bool = False) -> None:
    """Write one page, with the files nbgrader's release_feedback reads beside it. With
    `visible_only` (grade on submit before a due date), each check cell shows what its visible
    checks alone say and the page no score; such a page is never taken for the up-to-date one."""
    notebook = nbformat.read(page.notebook, as_version=4)
    info = {"student": page.student, "assignment": page.assignment, "notebook": page.assignment}
    info |= {"score": page.score - page.late_penalty, "max_score": page.max_score}
    info |= {"visible_only": visible_only}
    if visible_only:
        _show_visible_checks_only(notebook, Results.load(page.results).by_name())
    resources = {"nbgrader": info | {"late_penalty": page.late_penalty}}
    resources["config_dir"] = jupyter_config_dir()  # custom.css, as nbgrader's pages include it
    notebook, resources = ClearHiddenTests(enforce_metadata=False).preprocess(notebook, resources)
    notebook, resources = CSSHTMLHeaderPreprocessor().preprocess(notebook, resources)
    for cell in notebook.cells:
        # Where nbgrader's GetGrades puts them for its feedback template.
        meta, name = nbgrader_metadata(cell), grade_id(cell)
        if name in page.grades:
            meta["score"], meta["points"] = page.grades[name]
            meta["review"] = page.reviews.get(name, "")
        if name in page.comments:
            meta["comment"] = page.comments[name]
    html, _ = _html_exporter().from_notebook_node(notebook, resources=resources)
    page.folder.mkdir(parents=True, exist_ok=True)
    _replace(page.folder / f"{page.assignment}.html", html.encode())
    for name in EXCHANGE_FILES:
        kept = page.notebook.with_name(name)
        if kept.is_file():
            _replace(page.folder / name, kept.read_bytes())
    if visible_only:
        page.stamp.unlink(missing_ok=True)
    else:
        _replace(page.stamp, page.digest().encode())


def _show_visible_checks_only(notebook: NotebookNode, results: dict[str, ExerciseResult]) -> None:
    """Each check cell's output replaced by what its exercise's visible checks say (a result
    kept without it, a notebook graded before it was kept, says only why it was not judged)."""
    for cell in notebook.cells:
        if cell.cell_type != "code" or not is_test_cell(cell):
            continue
        result = results.get(exercise_of_test(grade_id(cell)))
        if result is None:
            continue
        text = result.visible_feedback or (result.feedback if result.cause else "")
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]


def _replace(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def leaks_hidden_tests(html: str) -> bool:
    return bool(HIDDEN_REGION.search(html))

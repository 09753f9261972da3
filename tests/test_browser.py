"""The course in a real JupyterLab, driven by headless Chromium (Playwright for Python).

Student: in a copy of `notebooks/`, the first notebook is run to its end (Run All, then on past
every stub that stops it), showing each stub's "not implemented" message, the formulas typeset by
MathJax and the figures; one exercise is answered in the editor, its visible checks pass, and
nbgrader's Validate button gives its verdict. Every other notebook is opened and run up to its
first exercise (the whole run is costly: notebook 04 alone trains for half a minute).

Instructor: a course where a small sample class was autograded, seen in formgrader inside
JupyterLab: the assignments, their notebooks, the students, and one student's scored notebook
with its diagnosis.

A screenshot of every step goes to build/browser-screenshots/ (the path is printed).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from grader.autograde import autograde
from grader.checks import EXERCISES
from grader.config import REPO, SOLUTIONS, assignments
from grader.course import Course
from grader.demo import PROFILES, write_class
from grader.notebook import answer_source, exercises_of, source_notebook

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"needs Debian's Chromium at {CHROMIUM} (apt-get install chromium)",
    ),
]

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="browser tests need playwright (pip install -e '.[test]')"
)

SCREENSHOTS = REPO / "build" / "browser-screenshots"
ASSIGNMENTS = assignments()
FULL_RUN = ASSIGNMENTS[0]  # the notebook run to its end; the others run to their first exercise
ANSWERED = exercises_of(source_notebook(FULL_RUN))[0]  # Run All stops at it: a student starts here
# Two students keep autograding near 25 s: one correct, one with a named mistake in FULL_RUN.
STUDENTS = {"ada": PROFILES["ada"], "ivy": PROFILES["ivy"]}
DIAGNOSED = ("ivy", "unbiased")  # the student opened in formgrader, and a word of its diagnosis

# Debian's Chromium, not Playwright's own download (which cannot work offline); as root it needs
# --no-sandbox, and nothing may reach the network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# User settings for the test servers: no news prompt over the notebook; every cell attached to the
# DOM (the default windowing leaves off-screen cells out, and the tests read every cell).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}
# The instructor server's nbgrader configuration: exactly what `grader autograde` records with.
NBGRADER_CONFIG = '''\
"""formgrader's view of the course graded by tests/test_browser.py."""
from pathlib import Path

from grader.course import Course

c = get_config()  # noqa: F821
c.merge(Course(Path({course!r})).api().config)
c.Exchange.root = {exchange!r}  # an existing exchange: no "exchange missing" banner
'''
NOT_IMPLEMENTED = "`{}` is not implemented yet (it raises NotImplementedError)."


# --- a JupyterLab server ---------------------------------------------------------------------


@dataclass(frozen=True)
class Lab:
    root: Path
    base: str
    token: str
    runtime: Path  # kernels' connection files: how their processes are found at the end
    log: Path

    def url(self, path: str) -> str:
        """A page of `path`, in a workspace reset to it alone (the server keeps the last page's
        layout, and would reopen an earlier test's notebooks and start their kernels)."""
        return f"{self.base}/{path}?token={self.token}&reset"

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(
            f"{self.base}/api/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_lab_settings(folder: Path) -> Path:
    for name, settings in LAB_SETTINGS.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    return folder


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains `text` (kernels name their connection file in it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # ended meanwhile
            continue
    return found


def wait_until_serving(lab: Lab, process: subprocess.Popen, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(
                f"jupyter lab exited ({process.returncode}):\n{lab.log.read_text()[-3000:]}"
            )
        try:
            lab.api("status")
            return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer within {seconds} s:\n{lab.log.read_text()[-3000:]}")


def stop_process_group(process: subprocess.Popen) -> None:
    """SIGTERM lets the server shut its kernels down; SIGKILL whatever does not end."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    try:  # the server's own children (terminals, language servers) share its group
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def running_lab(root: Path, state: Path) -> Iterator[Lab]:
    """`jupyter lab` serving `root` on a free port with a random token, started in `root` (nbgrader
    reads nbgrader_config.py from the working directory), its own session so it and its children
    are stopped together; fails if any of its kernels outlives it."""
    state.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    lab = Lab(
        root=root,
        base=f"http://127.0.0.1:{free_port()}",
        token=secrets.token_hex(16),
        runtime=state / "runtime",
        log=state / "jupyter.log",
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",  # this venv's kernel
        "JUPYTER_RUNTIME_DIR": str(lab.runtime),
        "JUPYTER_CONFIG_DIR": str(state / "config"),  # no personal ~/.jupyter settings
    }
    command = [
        str(bin_dir / "jupyter"),
        "lab",
        "--no-browser",
        f"--ServerApp.token={lab.token}",
        f"--port={lab.base.rsplit(':', 1)[1]}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.allow_root=True",  # CI runs as root
        f"--LabApp.user_settings_dir={write_lab_settings(state / 'settings')}",
        f"--LabApp.workspaces_dir={state / 'workspaces'}",
    ]
    with lab.log.open("w") as log:
        process = subprocess.Popen(
            command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_until_serving(lab, process)
        yield lab
    finally:
        stop_process_group(process)
        left = processes_mentioning(str(lab.runtime))
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"processes outlived jupyter lab: {left}"


def end_sessions(lab: Lab) -> None:
    """Each test's notebooks' kernels end with it (torch in each holds a few hundred MB)."""
    for session in lab.api("sessions"):
        lab.api(f"sessions/{session['id']}", method="DELETE")


# --- browser and screenshots -------------------------------------------------------------------


@pytest.fixture(scope="session")
def screenshots(request) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for old in SCREENSHOTS.glob("*.png"):  # only this run's steps
        old.unlink()
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter and capture:  # on the terminal, not in the captured output of the first test
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(f"browser screenshots: {SCREENSHOTS}")
    return SCREENSHOTS


@pytest.fixture(scope="session")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)  # two busy cores: kernels start and torch imports slowly
    yield context.new_page()
    context.close()


def screenshot(page, folder: Path, name: str, element=None) -> None:
    """The page as a person sees it, with `element` scrolled into view. Taken before the
    assertions on it, so a failing step leaves its picture too."""
    if element is not None:
        element.scroll_into_view_if_needed()
    page.screenshot(path=folder / f"{name}.png")


# --- JupyterLab, as a student uses it ----------------------------------------------------------

NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"
# Kernel started and idle, and no cell queued or running ("[*]").
IDLE = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return false;
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const kernel = panel.querySelector('.jp-KernelName');
  const running = [...panel.querySelectorAll('.jp-InputPrompt')]
    .some(p => p.textContent.includes('*'));
  return indicator?.dataset.status === 'idle' && kernel
    && !kernel.textContent.includes('No Kernel') && !running;
}"""
# The cell's prompt shows an execution count, and a new one when it was run before.
HAS_RUN = """([index, before]) => {
  const cell = document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')[index];
  const prompt = cell?.querySelector('.jp-InputPrompt')?.textContent ?? '';
  return /\\[\\d+\\]/.test(prompt) && prompt !== before;
}"""
# Per cell: code or not, its prompt, its red (stderr/error) text, its rendered images.
CELL_STATES = """cells => cells.map(cell => ({
  code: cell.classList.contains('jp-CodeCell'),
  prompt: cell.querySelector('.jp-InputPrompt')?.textContent ?? '',
  red: [...cell.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')]
    .map(e => e.textContent).join('\\n'),
  images: [...cell.querySelectorAll('.jp-RenderedImage img')].filter(i => i.naturalWidth > 0)
    .length,
}))"""


def cells(page):
    return page.locator(f"{NOTEBOOK} .jp-Notebook .jp-Cell")


def cell_states(page) -> list[dict]:
    return cells(page).evaluate_all(CELL_STATES)


def menu(page, title: str, command: str) -> None:
    page.locator("#jp-menu-panel .lm-MenuBar-item", has_text=title).first.click()
    page.locator(f"li.lm-Menu-item[data-command='{command}']").click()


def wait_until_idle(page) -> None:
    page.wait_for_function(IDLE, polling=250, timeout=120_000)


def prompt(page, index: int) -> str:
    return cells(page).nth(index).locator(".jp-InputPrompt").inner_text()


def wait_until_ran(page, index: int, before: str = "") -> None:
    """Until cell `index` has run (again, if its prompt read `before`) and the kernel is idle."""
    page.wait_for_function(HAS_RUN, arg=[index, before], polling=250, timeout=120_000)
    wait_until_idle(page)


def open_notebook(page, lab: Lab, path: str) -> None:
    page.goto(lab.url(f"lab/tree/{path}"))
    cells(page).first.wait_for()
    wait_until_idle(page)


def unrun_code_cells(page) -> list[int]:
    return [i for i, c in enumerate(cell_states(page)) if c["code"] and "[ ]" in c["prompt"]]


def run_all(page) -> None:
    first_code = next(i for i, c in enumerate(cell_states(page)) if c["code"])
    menu(page, "Run", "runmenu:run-all")
    wait_until_ran(page, first_code)


def run_all_past_every_error(page) -> None:
    """Run All stops at the first cell that raises (the kernel drops the rest of the queue), as
    it does for a student; who then runs on from the next cell. Repeated to the notebook's end."""
    run_all(page)
    for _ in range(cells(page).count()):
        left = unrun_code_cells(page)
        if not left:
            return
        cells(page).nth(left[0]).locator(".jp-InputPrompt").click()
        menu(page, "Run", "notebook:run-all-below")
        wait_until_ran(page, left[0])
    pytest.fail(f"cells still not run: {unrun_code_cells(page)}")


def grade_ids(notebook: nbformat.NotebookNode) -> list[str]:
    return [c.metadata.get("nbgrader", {}).get("grade_id", "") for c in notebook.cells]


def checks_cell_of(notebook: nbformat.NotebookNode, exercise: str) -> int:
    return grade_ids(notebook).index(f"{exercise}_tests")


def first_formula_cell(notebook: nbformat.NotebookNode) -> int:
    return next(
        i for i, c in enumerate(notebook.cells) if c.cell_type == "markdown" and "$" in c.source
    )


def solution_images(assignment: str) -> int:
    """The figures the notebook draws: nbval keeps the solutions' stored outputs current."""
    notebook = source_notebook(assignment)
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


def typed_answer(exercise: str, assignment: str) -> str:
    """What a student would type: the solution cell without nbgrader's solution markers."""
    source = answer_source(source_notebook(assignment), exercise)
    markers = {"### BEGIN SOLUTION", "### END SOLUTION"}
    return "\n".join(line for line in source.splitlines() if line.strip() not in markers)


def assert_math_typeset(page, index: int) -> None:
    rendered = cells(page).nth(index).locator(".jp-RenderedMarkdown")
    assert rendered.locator("mjx-container").count() > 0, "no MathJax output in the formula cell"
    assert "\\frac" not in rendered.inner_text() and "$" not in rendered.inner_text(), (
        "TeX source shown instead of typeset math"
    )


@pytest.fixture(scope="module")
def student_lab(tmp_path_factory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("student")
    root = base / "home"
    root.mkdir()
    with running_lab(root, base / "server") as lab:
        yield lab


@pytest.fixture
def release_copy(student_lab: Lab, request) -> Iterator[str]:
    """A fresh copy of notebooks/ for this test alone, as the folder's path in the server."""
    folder = re.sub(r"\W+", "_", request.node.name)
    shutil.copytree(REPO / "notebooks", student_lab.root / folder)
    yield folder
    end_sessions(student_lab)


def notebook_path(folder: str, assignment: str) -> str:
    return f"{folder}/{assignment}/{assignment}.ipynb"


def test_running_a_notebook_shows_each_stub_and_renders_the_rest(
    page, student_lab, release_copy, screenshots
):
    path = notebook_path(release_copy, FULL_RUN)
    release = nbformat.read(student_lab.root / path, as_version=4)
    stubs = {checks_cell_of(release, e): e for e in exercises_of(source_notebook(FULL_RUN))}
    open_notebook(page, student_lab, path)
    run_all_past_every_error(page)

    states = cell_states(page)
    first_stub = cells(page).nth(min(stubs))
    screenshot(page, screenshots, "student-1-run-all-stub-message", first_stub)
    assert len(states) == len(release.cells)
    assert [
        i for i, c in enumerate(states) if c["code"] and not re.search(r"\[\d+\]", c["prompt"])
    ] == []
    red = {i: c["red"] for i, c in enumerate(states) if c["red"]}
    assert sorted(red) == sorted(stubs), "only the exercises' test cells may show an error"
    for index, exercise in stubs.items():
        assert NOT_IMPLEMENTED.format(exercise) in red[index]

    formula = first_formula_cell(release)
    screenshot(page, screenshots, "student-2-formula", cells(page).nth(formula))
    assert_math_typeset(page, formula)

    figure = next(i for i, c in enumerate(states) if c["images"])
    screenshot(page, screenshots, "student-3-figure", cells(page).nth(figure))
    assert sum(c["images"] for c in states) == solution_images(FULL_RUN)


def test_answering_an_exercise_passes_its_checks_and_validate_says_what_is_left(
    page, student_lab, release_copy, screenshots
):
    path = notebook_path(release_copy, FULL_RUN)
    release = nbformat.read(student_lab.root / path, as_version=4)
    answer_cell = grade_ids(release).index(ANSWERED)
    checks_cell = checks_cell_of(release, ANSWERED)
    open_notebook(page, student_lab, path)
    run_all(page)  # stops at ANSWERED's checks, with the imports run

    answer = typed_answer(ANSWERED, FULL_RUN)
    editor = cells(page).nth(answer_cell).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(answer)  # one input event: no auto-indent or bracket closing
    assert editor.inner_text() == answer
    before = prompt(page, checks_cell)
    page.keyboard.press("Shift+Enter")  # the answer, then its checks
    page.keyboard.press("Shift+Enter")
    wait_until_ran(page, checks_cell, before)
    output = cells(page).nth(checks_cell).locator(".jp-OutputArea")
    screenshot(page, screenshots, "student-4-answer-passes-visible-checks", output)
    passed = re.search(rf"{ANSWERED}: (\d+) of (\d+) visible checks pass", output.inner_text())
    assert passed and passed[1] == passed[2], output.inner_text()
    assert "(more checks run when graded)" in output.inner_text()

    page.locator(f"{NOTEBOOK} .validate-button").click()  # saves, then runs nbgrader validate
    verdict = page.locator(".jp-Dialog #validation-message")
    verdict.wait_for(timeout=180_000)
    screenshot(page, screenshots, "student-5-validate-verdict")
    text = verdict.inner_text()
    assert "validation-failed" in (verdict.get_attribute("class") or ""), text
    assert NOT_IMPLEMENTED.format(ANSWERED) not in text  # the saved answer was validated
    for exercise in exercises_of(source_notebook(FULL_RUN)):
        if exercise != ANSWERED:
            assert NOT_IMPLEMENTED.format(exercise) in text
    page.locator(".jp-Dialog .jp-mod-accept").click()


@pytest.mark.parametrize("assignment", [a for a in ASSIGNMENTS if a != FULL_RUN])
def test_every_other_notebook_runs_to_its_first_exercise(
    page, student_lab, release_copy, screenshots, assignment
):
    path = notebook_path(release_copy, assignment)
    release = nbformat.read(student_lab.root / path, as_version=4)
    first = exercises_of(source_notebook(assignment))[0]
    stop = checks_cell_of(release, first)
    open_notebook(page, student_lab, path)
    run_all(page)

    states = cell_states(page)
    screenshot(page, screenshots, f"student-6-{assignment}-first-exercise", cells(page).nth(stop))
    red = {i: c["red"] for i, c in enumerate(states) if c["red"]}
    assert sorted(red) == [stop], "Run All must stop at the first exercise's checks, and only there"
    assert NOT_IMPLEMENTED.format(first) in red[stop]
    assert unrun_code_cells(page) == [i for i, c in enumerate(states) if c["code"] and i > stop]
    formula = first_formula_cell(release)
    assert_math_typeset(page, formula)


# --- formgrader, as an instructor uses it ------------------------------------------------------


@pytest.fixture(scope="module")
def graded_course(tmp_path_factory) -> Path:
    """A server root holding a course where the sample class (two students) was autograded, and
    the nbgrader_config.py formgrader reads. The course must lie inside the server's root."""
    base = tmp_path_factory.mktemp("instructor")
    root = base / "home"
    course = Course(root / "course")
    exchange = base / "exchange"
    exchange.mkdir()
    submissions = write_class(base / "submissions", STUDENTS)
    # Our own sample code: run without the sandbox, so bubblewrap is not needed here.
    outcomes = autograde(submissions, course, jobs=2, sandbox=None, progress=False)
    assert [o.problem for o in outcomes if o.problem] == []
    (root / "nbgrader_config.py").write_text(
        NBGRADER_CONFIG.format(course=str(course.root), exchange=str(exchange))
    )
    return root


@pytest.fixture(scope="module")
def instructor_lab(graded_course: Path, tmp_path_factory) -> Iterator[Lab]:
    with running_lab(graded_course, tmp_path_factory.mktemp("instructor-server")) as lab:
        yield lab


def open_formgrader(page, lab: Lab):
    """JupyterLab's Nbgrader menu → Formgrader, which opens formgrader in an iframe."""
    page.goto(lab.url("lab"))
    menu(page, "Nbgrader", "nbgrader:open-formgrader")
    frame = page.wait_for_selector("#jp-main-dock-panel iframe").content_frame()
    frame.wait_for_url("**/formgrader/manage_assignments")
    return frame


def table_column(frame, css: str) -> list[str]:
    """One column of formgrader's table, once its rows (fetched after the page) are in."""
    frame.locator(f"tbody td{css}").first.wait_for(state="attached")
    return [t.strip() for t in frame.locator(f"tbody td{css}").all_inner_texts()]


def score(text: str) -> tuple[float, float]:
    got, out_of = text.split("/")
    return float(got), float(out_of)


def points(assignment: str) -> float:
    return sum(EXERCISES[e].points for e in exercises_of(source_notebook(assignment)))


def test_formgrader_lists_the_assignments_their_notebooks_and_the_students(
    page, instructor_lab, screenshots
):
    frame = open_formgrader(page, instructor_lab)
    names = table_column(frame, ".name")
    screenshot(page, screenshots, "instructor-1-assignments")
    assert names == ASSIGNMENTS
    assert table_column(frame, ".num-submissions") == [str(len(STUDENTS))] * len(ASSIGNMENTS)

    frame.get_by_role("link", name="Manual Grading").click()
    frame.wait_for_url("**/formgrader/gradebook")
    for assignment in ASSIGNMENTS:
        frame.locator("tbody td a", has_text=assignment).click()
        frame.wait_for_url(f"**/formgrader/gradebook/{assignment}")
        notebooks = table_column(frame, ".name")
        screenshot(page, screenshots, f"instructor-2-notebooks-of-{assignment}")
        assert notebooks == [p.stem for p in sorted((SOLUTIONS / assignment).glob("*.ipynb"))]
        frame.locator(".breadcrumb a", has_text="Manual Grading").click()
        frame.wait_for_url("**/formgrader/gradebook")

    frame.get_by_role("link", name="Manage Students").click()
    frame.wait_for_url("**/formgrader/manage_students")
    students = table_column(frame, ".id")
    screenshot(page, screenshots, "instructor-3-students")
    assert students == sorted(STUDENTS)


def test_formgrader_shows_a_students_scores_and_diagnosis(page, instructor_lab, screenshots):
    student, diagnosis = DIAGNOSED
    expected = STUDENTS[student].expected(FULL_RUN)
    frame = open_formgrader(page, instructor_lab)
    frame.get_by_role("link", name="Manual Grading").click()
    frame.wait_for_url("**/formgrader/gradebook")
    frame.locator("tbody td a", has_text=FULL_RUN).click()
    frame.wait_for_url(f"**/formgrader/gradebook/{FULL_RUN}")
    frame.locator("tbody td a", has_text=FULL_RUN).click()
    frame.wait_for_url(f"**/formgrader/gradebook/{FULL_RUN}/{FULL_RUN}")
    frame.locator("tbody td.name a").first.wait_for(state="attached")
    frame.locator("#toggle_names").click()  # submissions are anonymous until asked
    row = frame.locator("tbody tr", has=frame.locator("a.name-shown", has_text=student))
    code_score = row.locator("td.code-score").inner_text()
    screenshot(page, screenshots, "instructor-4-submissions")
    assert score(code_score) == (sum(expected.values()), points(FULL_RUN))

    row.locator("a.name-shown").click()
    frame.wait_for_url("**/formgrader/submissions/**")
    box = frame.locator(f"input.score#{ANSWERED}_tests")
    cell = frame.locator("div.cell", has=box)
    feedback = cell.locator(".output_area").first
    screenshot(page, screenshots, f"instructor-5-{student}-{ANSWERED}-diagnosis", cell)
    assert float(box.get_attribute("placeholder")) == expected[ANSWERED]  # the autograded score
    out_of = re.search(r"/\s*([\d.]+)", cell.locator(".panel-heading").inner_text())
    assert out_of and float(out_of[1]) == EXERCISES[ANSWERED].points
    assert diagnosis in feedback.inner_text()

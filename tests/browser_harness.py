"""Driving JupyterLab in headless Chromium (Playwright for Python), for tests/test_browser.py
and tests/test_assignment_cycle.py (their fixtures: tests/browser_fixtures.py): a JupyterLab
server of its own, and what a person does in it (run and edit cells, read their
prompts, outputs and errors, fetch and submit in nbgrader's Assignment List, grade in
formgrader), each step waiting until the page has done it."""

from __future__ import annotations

import json
import os
import secrets
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

from grader.course import grade_id
from grader.course.config import REPO

CHROMIUM = Path("/usr/bin/chromium")
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

# Every browser test module's marks.
BROWSER_TESTS = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"needs Debian's Chromium at {CHROMIUM} (apt-get install chromium)",
    ),
]
SCREENSHOTS = REPO / "build" / "browser-screenshots"

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


def start_lab(root: Path, state: Path) -> tuple[Lab, subprocess.Popen]:
    """`jupyter lab` serving `root` on a free port with a random token, started in `root` (nbgrader
    reads nbgrader_config.py from the working directory), in its own session so that it and its
    children are stopped together."""
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
    return lab, process


@contextmanager
def running_labs(*places: tuple[Path, Path]) -> Iterator[list[Lab]]:
    """A JupyterLab server per (root, state folder) (see `start_lab`), started together and
    serving; fails if any of their kernels outlives them."""
    started = [start_lab(root, state) for root, state in places]
    try:
        for lab, process in started:
            wait_until_serving(lab, process)
        yield [lab for lab, _ in started]
    finally:
        left = []
        for lab, process in started:
            stop_process_group(process)
            left += processes_mentioning(str(lab.runtime))
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"processes outlived jupyter lab: {left}"


@contextmanager
def running_lab(root: Path, state: Path) -> Iterator[Lab]:
    with running_labs((root, state)) as (lab,):
        yield lab


def end_sessions(lab: Lab) -> None:
    """Each test's notebooks' kernels end with it (torch in each holds a few hundred MB)."""
    for session in lab.api("sessions"):
        lab.api(f"sessions/{session['id']}", method="DELETE")


# --- JupyterLab, as a person uses it ---------------------------------------------------------


def screenshot(page, folder: Path, name: str, element=None) -> None:
    """The page as a person sees it, with `element` scrolled into view. Taken before the
    assertions on it, so a failing step leaves its picture too."""
    if element is not None:
        element.scroll_into_view_if_needed()
    page.screenshot(path=folder / f"{name}.png")


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
# Whether cell `index` has run, or some cell shows red (stderr/error) text: Run All stops at a
# cell that raises, so the last one would never run.
RAN_OR_RED = """([index]) => {
  const all = document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell');
  const prompt = all[index]?.querySelector('.jp-InputPrompt')?.textContent ?? '';
  const red = [...all].some(
    cell => cell.querySelector('[data-mime-type="application/vnd.jupyter.stderr"]'));
  return /\\[\\d+\\]/.test(prompt) || red;
}"""
# Per cell: code or not, its prompt, its red (stderr/error) text, its rendered images.
CELL_STATES = """cells => cells.map(cell => ({
  code: cell.classList.contains('jp-CodeCell'),
  prompt: cell.querySelector('.jp-InputPrompt')?.textContent ?? '',
  red: [...cell.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')]
    .map(e => e.textContent).join('\\n'),
  images: [...cell.querySelectorAll('.jp-RenderedImage img')].filter(i => i.naturalWidth > 0)
    .length,
  output: cell.querySelector('.jp-OutputArea')?.textContent ?? '',
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
    """Run All, as a student does, until the notebook's last code cell has run: no cell raises
    in an unanswered release (a check says "not implemented yet", a demo uses the library). A
    cell that shows red text fails it at once, naming the cell and what it said."""
    last_code = max(i for i, c in enumerate(cell_states(page)) if c["code"])
    menu(page, "Run", "runmenu:run-all")
    page.wait_for_function(RAN_OR_RED, arg=[last_code], polling=250, timeout=120_000)
    wait_until_idle(page)
    red = {i: c["red"] for i, c in enumerate(cell_states(page)) if c["red"]}
    assert not red, f"Run All: cell {min(red)} shows red text: {red[min(red)][-600:]}"


def cell_index(notebook: nbformat.NotebookNode, name: str) -> int:
    """The position of the cell nbgrader names `name` (its grade_id) in `notebook`."""
    return [grade_id(c) for c in notebook.cells].index(name)


def assert_math_typeset(page, index: int) -> None:
    rendered = cells(page).nth(index).locator(".jp-RenderedMarkdown")
    assert rendered.locator("mjx-container").count() > 0, "no MathJax output in the formula cell"
    assert "\\frac" not in rendered.inner_text() and "$" not in rendered.inner_text(), (
        "TeX source shown instead of typeset math"
    )


def typed(source: str) -> str:
    """What a student types for a solution cell: its text without nbgrader's solution markers."""
    markers = {"### BEGIN SOLUTION", "### END SOLUTION"}
    return "\n".join(line for line in source.splitlines() if line.strip() not in markers)


def edit_cell(page, index: int, text: str) -> None:
    """Cell `index`'s text replaced by `text`, as typed (a rendered Markdown cell is opened for
    editing by a double click)."""
    cell = cells(page).nth(index)
    if cell.locator(".jp-MarkdownOutput").is_visible():
        cell.locator(".jp-MarkdownOutput").dblclick()
    editor = cell.locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)  # one input event: no auto-indent or bracket closing
    assert editor.inner_text() == text


def save_notebook(page) -> None:
    """Ctrl+S on an edited notebook, until its tab no longer shows unsaved changes."""
    unsaved = page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty")
    unsaved.wait_for(state="attached")  # the edit has reached the document
    page.keyboard.press("Control+s")
    unsaved.wait_for(state="detached")


# --- nbgrader's Assignment List, as a student uses it ----------------------------------------

STUDENT_CONFIG = """c = get_config()  # noqa: F821
c.Exchange.root = {exchange!r}
c.CourseDirectory.student_id = {student!r}  # who submits (nbgrader's default: the login)
c.Exchange.cache = {cache!r}  # what they submitted (nbgrader's default: in the login's home)
"""


def student_home(folder: Path, student: str, exchange: Path) -> Path:
    """A student's folder, with the nbgrader_config.py their JupyterLab reads: the course's
    exchange, who they are, and their own record of what they submitted."""
    folder.mkdir(parents=True)
    cache = folder / ".nbgrader-cache"
    config = STUDENT_CONFIG.format(exchange=str(exchange), student=student, cache=str(cache))
    (folder / "nbgrader_config.py").write_text(config)
    return folder


def set_exchange(course: Path, exchange: Path) -> None:
    """What README asks of an instructor in a `grader init` course: set the exchange."""
    exchange.mkdir(mode=0o777, exist_ok=True)
    with (course / "nbgrader_config.py").open("a") as config:
        config.write(f"c.Exchange.root = {str(exchange)!r}\n")


def open_assignment_list(page, lab: Lab) -> None:
    """JupyterLab's Nbgrader menu → Assignment List, once it has loaded the course's list."""
    page.goto(lab.url("lab"))
    menu(page, "Nbgrader", "nbgrader:open-assignment-list")
    page.locator("#course_list_dropdown:not([disabled])").wait_for(state="attached")


def listed(page, section: str, assignment: str):
    """`assignment`'s row in a section of the Assignment List: "released" (to fetch),
    "fetched" (to submit) or "submitted"."""
    return page.locator(f"#{section}_assignments_list > .list_item", has_text=assignment)


def press(page, button: str, assignment: str) -> None:
    """Press `button` ("Fetch", "Submit", "Fetch Feedback") on `assignment`'s row."""
    row = page.locator(".list_container > .list_item", has_text=assignment)
    row.get_by_role("button", name=button, exact=True).click()


# --- formgrader ------------------------------------------------------------------------------


def open_formgrader(page, lab: Lab):
    """JupyterLab's Nbgrader menu → Formgrader, which opens formgrader in an iframe."""
    page.goto(lab.url("lab"))
    menu(page, "Nbgrader", "nbgrader:open-formgrader")
    frame = page.wait_for_selector("#jp-main-dock-panel iframe").content_frame()
    frame.wait_for_url("**/formgrader/manage_assignments")
    return frame


def formgrader_row(frame, cell: str, text: str):
    """The row of formgrader's table whose cell `cell` (a selector) reads `text`."""
    return frame.locator("tbody tr", has=frame.locator(cell, has_text=text))


def press_in_row(frame, row, action: str) -> str:
    """The button of `row` in the column `action` ("assign", "release", "collect", "autograde",
    "generate-feedback", "release-feedback"). Fails with formgrader's error; else returns its
    log, once its dialog is closed."""
    row.locator(f"td.{action} a").click()
    dialog = frame.locator("#success-modal, #error-modal")
    dialog.get_by_role("button", name="OK").wait_for(timeout=180_000)
    log = dialog.inner_text()
    assert dialog.get_attribute("id") == "success-modal", log
    dialog.get_by_role("button", name="OK").click()
    dialog.wait_for(state="detached")
    return log


def on_assignment(frame, assignment: str, action: str) -> str:
    """Manage Assignments' `action` on `assignment` ("assign": generate its student version)."""
    return press_in_row(frame, formgrader_row(frame, "td.name", assignment), action)


def table_column(frame, css: str) -> list[str]:
    """One column of formgrader's table, once its rows (fetched after the page) are in."""
    frame.locator(f"tbody td{css}").first.wait_for(state="attached")
    return [t.strip() for t in frame.locator(f"tbody td{css}").all_inner_texts()]


def score(text: str) -> tuple[float, float]:
    got, out_of = text.split("/")
    return float(got), float(out_of)


def submission_row(frame, assignment: str, student: str):
    """Manual Grading → `assignment` → its notebook: the row of `student`'s submission, with
    the students' names shown (submissions are anonymous until asked)."""
    frame.get_by_role("link", name="Manual Grading").click()
    frame.wait_for_url("**/formgrader/gradebook")
    frame.locator("tbody td a", has_text=assignment).click()
    frame.wait_for_url(f"**/formgrader/gradebook/{assignment}")
    frame.locator("tbody td a", has_text=assignment).click()  # its one notebook
    frame.wait_for_url(f"**/formgrader/gradebook/{assignment}/{assignment}")
    frame.locator("tbody td.name a").first.wait_for(state="attached")
    frame.locator("#toggle_names").click()
    return frame.locator("tbody tr", has=frame.locator("a.name-shown", has_text=student))


def open_submission(frame, row) -> None:
    """The submitted notebook of a `submission_row`, with its scores and outputs."""
    row.locator("a.name-shown").click()
    frame.wait_for_url("**/formgrader/submissions/**")
    frame.locator("input.score").first.wait_for()


def grade_by_hand(frame, cell: str, points: float, comment: str) -> None:
    """What a TA types into the cell nbgrader names `cell`: a score and a comment, each saved
    by formgrader when the field loses focus (waited for: the server's answer)."""
    for field, value, api in (
        (f"input.score#{cell}", str(points), "/api/grade/"),
        (f"textarea#{cell}-comment", comment, "/api/comment/"),
    ):
        with frame.page.expect_response(
            lambda r, api=api: api in r.url and r.request.method == "PUT" and r.ok
        ):
            frame.locator(field).fill(value)
            frame.locator(field).press("Tab")


def rendered_text(page, lab: Lab, path: str) -> str:
    """What the browser shows of the HTML page the server holds at `path` (from its root)."""
    page.goto(f"{lab.base}/files/{path}?token={lab.token}")
    return page.locator("body").inner_text()

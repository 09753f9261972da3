"""Our steps inside nbgrader's own pipelines (configured by `grader.autograde.Course.config`).

`InjectResults` takes the place of nbgrader's `Execute` in autograde: instead of running the
student's notebook in a kernel, it writes into each test cell the outputs the trusted grader
computed (the feedback text and the partial score), so `SaveAutoGrades`, formgrader, feedback
and export work unchanged. No student code runs in nbgrader's process: when nbgrader's own
`autograde` (or formgrader's Autograde button) records a notebook the course has no result for,
or whose result was graded from other bytes, the notebook is graded first, in the sandbox, by
the same checks as `grader autograde`.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbformat.notebooknode import NotebookNode
from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Unicode

TEST_SUFFIX = "_tests"


def results_path(results_dir: Path, student: str, assignment: str) -> Path:
    return Path(results_dir) / student / f"{assignment}.json"


def _is_test_cell(cell: NotebookNode) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and meta.get("grade") and not meta.get("solution")


class InjectResults(NbGraderPreprocessor):
    results_dir = Unicode(help="Folder of <student>/<assignment>.json results").tag(config=True)
    submissions_dir = Unicode(
        help="nbgrader's submitted/ folder: <student>/<assignment>/<assignment>.ipynb"
    ).tag(config=True)
    graded_now = Bool(
        False, help="The results were just graded from the very notebook being recorded"
    ).tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict):
        info = resources["nbgrader"]
        if not self.graded_now:
            self._grade_unless_current(info["student"], info["assignment"])
        path = results_path(Path(self.results_dir), info["student"], info["assignment"])
        results = {r["name"]: r for r in json.loads(path.read_text())["exercises"]}
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            cell.outputs = []  # experiments are not executed while grading
            if not _is_test_cell(cell):
                continue
            result = results.get(cell.metadata.nbgrader["grade_id"].removesuffix(TEST_SUFFIX))
            if result is None:  # never leave a test cell empty: empty means full marks
                cell.outputs = [
                    new_output("error", ename="NotGraded", evalue="no result", traceback=[])
                ]
                continue
            cell.outputs = [
                new_output("stream", name="stdout", text=result["feedback"] + "\n"),
                new_output(
                    "execute_result",
                    data={"text/plain": repr(float(result["score"]))},
                    execution_count=1,
                ),
            ]
        return nb, resources

    def _grade_unless_current(self, student: str, assignment: str) -> None:
        """Grade the submitted notebook in the sandbox unless its stored result was graded
        from these very bytes (and this answer key)."""
        from grader.autograde import grade_submission  # autograde configures this step

        submission = Path(self.submissions_dir) / student / assignment / f"{assignment}.ipynb"
        grade_submission(Path(self.results_dir).parent, student, assignment, submission)

"""Our step inside nbgrader's own autograde (configured by `grader.gradebook.config`).

`InjectResults` takes the place of nbgrader's `Execute`: instead of running the student's
notebook in a kernel, it writes into each test cell the outputs the trusted grader computed (the
feedback text and the partial score), so `SaveAutoGrades`, formgrader, feedback and export work
unchanged. No student code runs in nbgrader's process: when nbgrader's own `autograde` (or
formgrader's Autograde button) records a notebook the course has no result for, or whose result
was graded from other bytes, `grader.autograde.GradeThenInject` grades it first, in the sandbox,
by the same checks as `grader autograde`.
"""

from __future__ import annotations

from pathlib import Path

from nbformat.notebooknode import NotebookNode
from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Unicode

from grader.course import (
    Results,
    exercise_of_test,
    grade_id,
    is_test_cell,
    results_file,
)


class InjectResults(NbGraderPreprocessor):
    results_dir = Unicode(help="A course's results folder (grader.course.Course.results)").tag(
        config=True
    )
    submissions_dir = Unicode(
        help="nbgrader's submitted/ folder: <student>/<assignment>/<assignment>.ipynb"
    ).tag(config=True)
    graded_now = Bool(
        False, help="The results were just graded from the very notebook being recorded"
    ).tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict):
        info = resources["nbgrader"]
        path = results_file(Path(self.results_dir), info["student"], info["assignment"])
        results = Results.load(path).by_name()
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            cell.outputs = []  # experiments are not executed while grading
            if not is_test_cell(cell):
                continue
            result = results.get(exercise_of_test(grade_id(cell)))
            if result is None:  # never leave a test cell empty: empty means full marks
                cell.outputs = [
                    new_output("error", ename="NotGraded", evalue="no result", traceback=[])
                ]
                continue
            cell.outputs = [
                new_output("stream", name="stdout", text=result.feedback + "\n"),
                # nbgrader reads a test cell's partial score from its value's text
                new_output(
                    "execute_result",
                    data={"text/plain": repr(float(result.score))},
                    execution_count=1,
                ),
            ]
        return nb, resources

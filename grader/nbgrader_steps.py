"""Our steps inside nbgrader's own pipelines (configured in `grader.autograde`).

`InjectResults` takes the place of nbgrader's `Execute` in autograde: instead of running the
student's notebook in a kernel, it writes into each test cell the outputs the trusted grader
computed (the feedback text and the partial score), so `SaveAutoGrades`, formgrader, feedback
and export work unchanged. No student code runs in this step.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbformat.notebooknode import NotebookNode
from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

TEST_SUFFIX = "_tests"


def results_path(results_dir: Path, student: str, assignment: str) -> Path:
    return Path(results_dir) / student / f"{assignment}.json"


def _is_test_cell(cell: NotebookNode) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and meta.get("grade") and not meta.get("solution")


class InjectResults(NbGraderPreprocessor):
    results_dir = Unicode(help="Folder of <student>/<assignment>.json results").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict):
        info = resources["nbgrader"]
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

"""The grader's decisions as plain records: what the gradebook, the feedback and the class
report read of a graded notebook, kept as results/<student>/<assignment>.json."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

# Why no output of an exercise could be judged (ExerciseResult.cause), in a few words.
UNJUDGED = {
    "missing": "no answer",
    "unanswered": "not answered (the stub still raises NotImplementedError)",
    "crash": "crashed",
    "timeout": "timed out",
}
# The causes that mean the student did not attempt the exercise (not that they got it wrong).
UNATTEMPTED = frozenset({"missing", "unanswered"})


@dataclass(frozen=True)
class Diagnosis:
    """A classic mistake the checks recognized in an answer: its name in the checks, and the
    sentence the student's feedback gives it."""

    name: str
    message: str


@dataclass(frozen=True)
class ExerciseResult:
    """What the gradebook, the feedback and the class report need of one exercise: plain
    numbers and text."""

    name: str
    score: float
    max_score: float
    feedback: str
    cause: str = ""  # a key of UNJUDGED: why no output of it could be judged
    diagnoses: tuple[Diagnosis, ...] = ()  # the mistakes recognized, as the feedback names them
    visible_feedback: str = ""  # what the visible checks alone say (`Verdict.visible`)


@dataclass(frozen=True)
class Results:
    """The grader's decision on one submitted notebook, as results/<student>/<assignment>.json
    keeps it for nbgrader's autograde to record."""

    exercises: list[ExerciseResult]
    fingerprint: str = ""  # of the submission and the source it was graded against
    problem: str = ""  # why the notebook could not be read ("" when it was)
    seed: int | None = None  # of the hidden inputs it was graded on: a regrade reuses it

    @property
    def score(self) -> float:
        return sum(e.score for e in self.exercises)

    @property
    def max_score(self) -> float:
        return sum(e.max_score for e in self.exercises)

    def by_name(self) -> dict[str, ExerciseResult]:
        return {e.name: e for e in self.exercises}

    def save(self, path: Path) -> None:
        write_atomically(path, json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Results:
        stored = json.loads(path.read_text())
        exercises = [
            ExerciseResult(
                **{**e, "diagnoses": tuple(Diagnosis(**d) for d in e.get("diagnoses", ()))}
            )
            for e in stored["exercises"]
        ]
        fields = stored.get("fingerprint", ""), stored.get("problem", ""), stored.get("seed")
        return cls(exercises, *fields)


def results_file(results: Path, student: str, assignment: str) -> Path:
    """Where `Results` of a student's notebook are kept in a course's `results` folder."""
    return results / student / f"{assignment}.json"


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old text or the new, never a part (a killed run leaves a `.partial`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(text)
    os.replace(partial, path)

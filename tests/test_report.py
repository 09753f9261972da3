"""The class report's page from recorded results: each exercise's difficulty split into the
students who did not attempt it and those who got it wrong, the written answers graded and to
grade, a line per student, and the checks' backticked names as code, escaped."""

from __future__ import annotations

import math

from grader.course import Course, ExerciseResult, Results
from grader.publish.class_report import (
    Recorded,
    StudentLine,
    WrittenStats,
    code_names,
    exercise_stats,
    render,
)

ASSIGNMENT = "01_layer_norm"


def test_backticked_names_are_code_and_the_rest_is_escaped():
    text = "`layer_norm` divides by `n-1` <script>alert(1)</script>"
    assert code_names(text) == (
        "<code>layer_norm</code> divides by <code>n-1</code> &lt;script&gt;alert(1)&lt;/script&gt;"
    )
    assert code_names("`<b>`") == "<code>&lt;b&gt;</code>"


def class_of_three(tmp_path) -> Course:
    """cyd handed in nothing, ivy got stable_var partly wrong, ada got it right."""
    course = Course(tmp_path / "course")
    results = {
        "cyd": ExerciseResult("stable_var", 0.0, 3.0, "No answer.", cause="missing"),
        "ivy": ExerciseResult("stable_var", 1.0, 3.0, "Wrong for large means."),
        "ada": ExerciseResult("stable_var", 3.0, 3.0, ""),
    }
    for student, result in results.items():
        Results([result]).save(course.results_file(student, ASSIGNMENT))
    return course


def test_the_difficulty_is_split_into_not_attempted_and_wrong(tmp_path):
    (stats,) = exercise_stats(class_of_three(tmp_path), ASSIGNMENT, ["ada", "cyd", "ivy"])
    assert (stats.unattempted, stats.wrong) == (1, 1)
    assert math.isclose(stats.difficulty, 5 / 9)  # 4 of the class's 9 points earned
    assert math.isclose(stats.unattempted_share, 3 / 9)  # cyd's 3
    assert math.isclose(stats.wrong_share, 2 / 9)  # ivy's 2


def test_the_page_shows_the_split_the_written_answers_and_each_student(tmp_path):
    course = class_of_three(tmp_path)
    stats = exercise_stats(course, ASSIGNMENT, ["ada", "cyd", "ivy"])
    written = [WrittenStats("why_layer_norm", 2.0, graded=[1.5], to_grade=2)]
    students = [
        StudentLine("ada", 3.0, [], 1),
        StudentLine("cyd", 0.0, ["stable_var: not attempted"], 0),
        StudentLine("ivy", 1.0, ["stable_var: 1/3"], 1),
    ]
    page = render(ASSIGNMENT, Recorded(5.0, [3.0, 0.0, 1.0], written, students), stats)
    assert (
        "<td>stable_var</td><td>3</td><td>1.33</td><td>56%</td><td>1 (33%)</td><td>1 (22%)" in page
    )
    assert "<tr><td>why_layer_norm</td><td>2</td><td>1</td><td>1.50</td><td>2</td></tr>" in page
    assert "<tr><td>cyd</td><td>0</td><td>stable_var: not attempted</td><td>0</td></tr>" in page
    assert "<tr><td>ivy</td><td>1</td><td>stable_var: 1/3</td><td>1</td></tr>" in page

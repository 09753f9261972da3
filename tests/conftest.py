"""Settings and fixtures shared by the whole test suite."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from course_walk import walked_once

import norm_utils
from grader.checks import EXERCISES, Exercise, run
from grader.checks.core import StudentError, judge, outputs_of, prepare
from grader.course.config import assignments
from grader.course.intake import answer_source, exercises_of, setup_code, source_notebook
from grader.grading.sandboxed.calling import load_answer
from normcheck import run_answer

# The browser tests' fixtures: the browser, a page per test, the screenshots' folder.
pytest_plugins = ["browser_fixtures"]

# The tests use tiny tensors, where a second intra-op thread only adds synchronization; on a busy
# 2-core machine its spin-waiting made the suite several times slower.
torch.set_num_threads(1)

# The longest test files, longest first (measured with --durations): `make test` hands whole
# files to its workers in collection order (--dist loadfile --no-loadscope-reorder), so starting
# these first keeps one of them from running alone at the end. test_readme.py walks README's
# nbgrader course (the `readme_walk` fixture) for test_course.py: it starts early, so that
# test_course.py, well behind it, finds the walk done rather than waiting for it.
LONGEST_FIRST = (
    "test_release.py",
    "test_run_all_unanswered.py",
    "test_readme.py",
    "test_faults.py",
    "test_browser.py",
    "test_course.py",
    "test_checks_seeds.py",
    "test_checks.py",
    "test_grading.py",
    "test_serve.py",
    "test_cli.py",
    "test_adversarial.py",
)


# Grading seeds every check must hold for: hidden inputs are drawn afresh in every grading run.
SEEDS = (0, 1, 2**31 - 1)


def solution_answers() -> dict[str, tuple[Any, str]]:
    """Every exercise's (answer, source), from the solution notebooks' answer cells, loaded as
    the autograder loads them: the imports cell, then that one answer cell, nothing else."""
    found = {}
    for assignment in assignments():
        notebook = source_notebook(assignment)
        for name in exercises_of(notebook):
            source = answer_source(notebook, name)
            found[name] = (load_answer(setup_code(notebook), source, name), source)
    return found


@pytest.fixture(scope="session")
def solutions() -> dict[str, tuple[Any, str]]:
    return solution_answers()


@pytest.fixture(scope="session")
def readme_walk(tmp_path_factory) -> Path:
    """The folder of README's nbgrader walk, walked once for all the session's test processes
    (tests/course_walk.py): for reading; a test that changes it works on a copy (`copy_of`)."""
    base = tmp_path_factory.getbasetemp()
    return walked_once(base.parent if "PYTEST_XDIST_WORKER" in os.environ else base)


def known_mistake(exercise: Exercise, name: str) -> Callable:
    """The code of `exercise`'s known mistake called `name`."""
    found = {m.name: m.impl for m in exercise.mistakes}
    if name not in found:
        raise KeyError(f"{exercise.name} has no mistake {name!r}; it has {sorted(found)}")
    return found[name]


def answer_from(source: str, name: str) -> Any:
    """A hand-written answer (a cheat, a mistake) defined with the notebooks' usual names."""
    namespace = {"torch": torch, "F": torch.nn.functional, "nn": torch.nn}
    namespace |= {"norm_utils": norm_utils, "nu": norm_utils}
    exec(compile(textwrap.dedent(source), f"<answer {name}>", "exec"), namespace)
    return namespace[name]


def each_cheat(cheats: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(exercise, source) for every cheating answer in `cheats` (exercise -> sources)."""
    return [(name, source) for name, sources in cheats.items() for source in sources]


def cheats_earn_nothing(cheats: dict[str, list[str]]) -> Callable[[str, str], None]:
    """A test that each answer of `cheats` (exercise -> sources), a library shortcut where an
    implementation is asked for, earns nothing and is told why."""

    @pytest.mark.parametrize(("name", "source"), each_cheat(cheats), ids=lambda v: v[:40])
    def test(name: str, source: str) -> None:
        assert_a_cheat_earns_nothing(EXERCISES[name], source)

    return test


def assert_a_cheat_earns_nothing(exercise: Any, source: str) -> None:
    """A library shortcut where the exercise asks for an implementation scores 0, and says why."""
    verdict = run(exercise, answer_from(source, exercise.name), hidden=True, seed=0, source=source)
    assert verdict.score == 0
    assert "earns no points" in verdict.render()


# The fast tier (`make test-fast`) leaves out these modules: each grades a class in the sandbox,
# runs nbgrader's cycle, builds and installs a wheel, drives a browser or executes notebooks.
SLOW_MODULES = {
    "test_adversarial",
    "test_assignment_cycle",
    "test_blocking",
    "test_browser",
    "test_cli",
    "test_course",
    "test_faults",
    "test_feedback",
    "test_grading",
    "test_mutants",
    "test_no_answers_for_students",
    "test_packaging",
    "test_readme",
    "test_release",
    "test_run_all_unanswered",
    "test_runner",
    "test_sandbox",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__.split(".")[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@cache
def _prepared(name: str, seed: int):
    return prepare(EXERCISES[name], hidden=True, seed=seed)


def graded(exercise: Exercise, answer: Any, seed: int) -> Any:
    """run(exercise, answer, hidden=True, seed=seed, source=""), with the checks' inputs and
    expected outputs prepared once a seed and shared by the exercise's known mistakes, as a
    grading run shares them with its students: each mistake's outputs, which tell it apart, are
    computed once a seed, not again for every mistake judged (nine networks for MyBatchNorm1d).
    The answer gets a copy of the inputs, so that none can change what the next one is judged on.
    """
    ready = _prepared(exercise.name, seed)
    inputs = [{k: v.copy() for k, v in case.items()} for _, case in ready.planned]
    outputs, integrity = run_answer(exercise, answer, inputs, "")
    return judge(exercise, ready.planned, outputs, integrity, ready.expected)


def outputs_or_error(exercise: Exercise, impl: Any, inputs: dict) -> Any:
    """The answer's outputs on `inputs`, or the StudentError it raised."""
    try:
        return outputs_of(exercise, impl, inputs)
    except Exception as error:  # a mistake need not apply to every input
        return StudentError(type(error).__name__, str(error))

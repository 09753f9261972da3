"""Wrong answers made systematically from a right one, to measure the checks.

Each mutant changes one place of an answer's source, the way a student's slip would: a constant
(0 ↔ 1, an off-by-one, ε ×10), an operator (+ ↔ −, * ↔ /, < ↔ <=, `is` ↔ `is not`), an operand
dropped (a term, a residual, a subtracted mean) or two swapped, a reduction changed (mean ↔ sum,
its dims dropped or replaced by the last dim, `keepdim` off), or a statement deleted (an in-place
update, an `if` branch). A mutant is equivalent when its outputs equal the unmutated answer's on
every check's inputs under several seeds and on those inputs redrawn from another law; only the
others count (`bench/mutants.py`).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grader.checks import EXERCISES, run
from grader.checks.core import Arrays, Exercise, Outputs, StudentError, Verdict, plan
from grader.course.config import assignments
from grader.course.intake import answer_source, exercises_of, setup_code, source_notebook
from grader.grading.sandboxed.calling import call, load_answer

_SWAPPED_OPS = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.Pow: ast.Mult,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_REDUCTIONS = {"mean": "sum", "sum": "mean", "var": "mean", "sqrt": "rsqrt", "rsqrt": "sqrt"}


@dataclass(frozen=True)
class Mutant:
    kind: str  # which operator made it
    line: int  # where, in the answer's source
    source: str


def _constant(node: ast.Constant) -> Iterator[tuple[str, ast.AST]]:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if isinstance(value, int):
        for changed in {value + 1, value - 1, 0 if value else 1}:
            yield "constant", ast.Constant(changed)
    else:
        yield "constant", ast.Constant(value * 10 if value else 1.0)


def _binop(node: ast.BinOp) -> Iterator[tuple[str, ast.AST]]:
    if type(node.op) in _SWAPPED_OPS:
        yield "operator", ast.BinOp(node.left, _SWAPPED_OPS[type(node.op)](), node.right)
    yield "dropped operand", node.left
    yield "dropped operand", node.right
    if isinstance(node.op, ast.Sub | ast.Div | ast.Pow):
        yield "swapped operands", ast.BinOp(node.right, node.op, node.left)


def _compare(node: ast.Compare) -> Iterator[tuple[str, ast.AST]]:
    if type(node.ops[0]) in _SWAPPED_OPS:
        ops = [_SWAPPED_OPS[type(node.ops[0])](), *node.ops[1:]]
        yield "comparison", ast.Compare(node.left, ops, node.comparators)


def _call(node: ast.Call) -> Iterator[tuple[str, ast.AST]]:
    if not isinstance(node.func, ast.Attribute):
        return
    name = node.func.attr
    if name in _REDUCTIONS:
        func = ast.Attribute(node.func.value, _REDUCTIONS[name], ast.Load())
        yield "reduction", ast.Call(func, node.args, node.keywords)
    if name in {"mean", "sum", "var"} and node.args:
        yield "dims dropped", ast.Call(node.func, [], node.keywords)
        last = [ast.UnaryOp(ast.USub(), ast.Constant(1)), *node.args[1:]]
        yield "dims: last only", ast.Call(node.func, last, node.keywords)
    for i, keyword in enumerate(node.keywords):
        if keyword.arg == "keepdim":
            keywords = [*node.keywords[:i], *node.keywords[i + 1 :]]
            yield "keepdim dropped", ast.Call(node.func, node.args, keywords)


def _statement(node: ast.stmt) -> Iterator[tuple[str, ast.AST]]:
    if isinstance(node, ast.Expr | ast.If | ast.Assign | ast.AugAssign | ast.With):
        yield "statement deleted", ast.Pass()


def _alternatives(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    if isinstance(node, ast.Constant):
        yield from _constant(node)
    elif isinstance(node, ast.BinOp):
        yield from _binop(node)
    elif isinstance(node, ast.Compare):
        yield from _compare(node)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Not):
        yield "sign or negation dropped", node.operand
    elif isinstance(node, ast.Call):
        yield from _call(node)
    if isinstance(node, ast.stmt) and not _docstring(node):
        yield from _statement(node)


def _docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


def _replace(tree: ast.AST, index: int, new: ast.AST) -> ast.AST:
    """A copy of `tree` with its `index`-th node (in ast.walk order) replaced by `new`."""
    tree = copy.deepcopy(tree)
    target = list(ast.walk(tree))[index]
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, field, copy.deepcopy(new))
            elif isinstance(value, list) and any(v is target for v in value):
                setattr(parent, field, [copy.deepcopy(new) if v is target else v for v in value])
    return ast.fix_missing_locations(tree)


def mutants(source: str) -> list[Mutant]:
    """Every one-place mutant of `source` whose text differs from the original's."""
    tree = ast.parse(source)
    original = ast.unparse(tree)
    found: dict[str, Mutant] = {}
    for index, node in enumerate(ast.walk(tree)):
        if _docstring(node) or isinstance(node, ast.FunctionDef | ast.ClassDef):
            continue
        for kind, new in _alternatives(node):
            text = ast.unparse(_replace(tree, index, new))
            if text != original and text not in found:
                found[text] = Mutant(kind, getattr(node, "lineno", 0), text)
    return list(found.values())


# ---------------------------------------------------------------------------------------------
# What the checks make of a mutant

# Not grading seeds: equivalence is judged on other inputs than the ones graded.
EQUIVALENCE_SEEDS = (101, 102, 103, 104, 105, 106)
OUTCOMES = ("equivalent", "missed", "named", "explained", "raised", "located")


def _same(first: Outputs, second: Outputs) -> bool:
    """Equal outputs up to float rounding (a reassociated sum), or the same exception type."""
    if isinstance(first, StudentError) or isinstance(second, StudentError):
        return (
            isinstance(first, StudentError)
            and isinstance(second, StudentError)
            and (first.kind == second.kind)
        )
    if first.keys() != second.keys():
        return False
    return all(
        first[k].shape == second[k].shape
        and np.allclose(first[k], second[k], rtol=1e-6, atol=1e-9, equal_nan=True)
        for k in first
    )


def redrawn(inputs: Arrays, rng: np.random.Generator) -> Arrays:
    """`inputs` with every float array of one dim or more replaced by fresh values of another
    law (heavy-tailed, its own offset and scale), shapes, dtypes and the rest kept: values the
    checks' generators never draw, so that equivalence does not rest on their choices."""
    fresh = {}
    for key, value in inputs.items():
        if value.ndim and np.issubdtype(value.dtype, np.floating):
            law = rng.standard_t(3, value.shape) * rng.uniform(0.1, 10) + rng.normal(0, 5)
            value = np.where(np.isnan(value), value, law).astype(value.dtype)
        fresh[key] = value
    return fresh


def equivalent(exercise: Exercise, answer: Any, mutant: Any) -> bool:
    """The mutant gives the answer's outputs on every check's inputs under other seeds than
    grading's, and on the same inputs with their values redrawn from another law."""
    for seed in EQUIVALENCE_SEEDS:
        rng = np.random.default_rng(seed)
        for _, inputs in plan(exercise, hidden=True, seed=seed):
            for case in (inputs, redrawn(inputs, rng)):
                if not _same(call(exercise, answer, case)[0], call(exercise, mutant, case)[0]):
                    return False
    return True


def outcome(verdict: Verdict) -> str:
    """How grading treats a wrong answer: full marks (missed), a known mistake named, a property
    it violates explained, its own exception shown, or only where and how much it differs."""
    failed = [o for o in verdict.outcomes if not o.passed]
    if not failed:
        return "missed"
    if verdict.diagnoses:
        return "named"
    if any(o.finding for o in failed):
        return "explained"
    return "raised" if all(o.raised for o in failed) else "located"


def solution_cells() -> list[tuple[str, str, str]]:
    """(exercise, notebook setup code, solution cell source) for every graded exercise."""
    cells = []
    for assignment in assignments():
        notebook = source_notebook(assignment)
        setup = setup_code(notebook)
        cells += [(name, setup, answer_source(notebook, name)) for name in exercises_of(notebook)]
    return cells


def judge_mutant(exercise: Exercise, setup: str, answer: Any, mutant: Mutant, seed: int) -> str:
    """One of OUTCOMES for `mutant` of `answer` (loaded with the notebook's `setup`)."""
    try:
        wrong = load_answer(setup, mutant.source, exercise.name)
    except Exception:  # a mutant that does not even define the answer: graded as raising
        return "raised"
    if equivalent(exercise, answer, wrong):
        return "equivalent"
    return outcome(run(exercise, wrong, hidden=True, seed=seed, source=mutant.source))


# ---------------------------------------------------------------------------------------------
# Wrong answers written by hand, as students write them (tests/wrong_answers): the holdout that
# tells whether the checks generalize beyond the mistakes and mutants they were tuned on


@dataclass(frozen=True)
class WrittenAnswer:
    exercise: str  # the file's name up to "__"
    path: Path
    source: str
    feedback: str  # words the feedback must contain ("# feedback: …" in the file), or ""


def written_answers(folder: Path) -> list[WrittenAnswer]:
    """Every `<exercise>__<what>.answer` in `folder` (Python source, run in its notebook's
    namespace as a student's answer cell is; not a module of this repository), for an exercise
    the checks know."""
    found = []
    for path in sorted(folder.glob("*__*.answer")):
        exercise = path.name.split("__")[0]
        if exercise not in EXERCISES:
            raise ValueError(f"{path.name}: no exercise is named {exercise!r}")
        source = path.read_text()
        marked = [line for line in source.splitlines() if line.startswith("# feedback: ")]
        feedback = marked[0].removeprefix("# feedback: ") if marked else ""
        found.append(WrittenAnswer(exercise, path, source, feedback))
    return found


def judge_written(answer: WrittenAnswer, setups: dict[str, str], seed: int) -> Verdict | str:
    """The verdict on a hand-written answer, graded as the autograder grades; "raised" when it
    does not even define the answer."""
    exercise = EXERCISES[answer.exercise]
    try:
        loaded = load_answer(setups[answer.exercise], answer.source, exercise.name)
    except Exception:
        return "raised"
    return run(exercise, loaded, hidden=True, seed=seed, source=answer.source)

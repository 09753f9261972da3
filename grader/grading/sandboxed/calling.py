"""The student's side of a check: load an answer, call it on given inputs, return plain arrays.

This module runs wherever the student's code runs (their kernel, `grader check`, or the grading
sandbox). It trusts nothing the answer returns beyond converting it to numbers, and it notes any
call to a library normalization the exercise forbids (the run-time tripwire), so that a use the
source hides from the static scan can still be reported. The tripwire lives in the answer's own
process, so the answer can reach it: it is a second opinion, not a guarantee.

What it needs of an exercise is its `name`, its `probe` (a function of `probes`) and its
`forbidden` names: a `grader.checks.core.Exercise` in the grader's process, a `Task` in the
sandboxed runner, which has nothing else of the exercise.
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

# Inputs, and outputs keyed by what feedback calls them: a name the exercise's text uses
# (`y`, `running_mean`, `grad_x`) or a few words ("output of training step 1").
Arrays = dict[str, np.ndarray]
Probe = Callable[[Any, Arrays], dict[str, Any]]


class Probed(Protocol):
    name: str
    probe: Probe
    forbidden: tuple[str, ...]


@dataclass(frozen=True)
class Task:
    """An exercise as the sandboxed runner knows it: what to call, and how."""

    name: str
    probe: Probe
    forbidden: tuple[str, ...]


@dataclass(frozen=True)
class StudentError:
    """The student's code raised (or crashed) instead of returning arrays."""

    kind: str  # exception type name, or "crash" / "timeout"
    message: str

    def describe(self, name: str) -> str:
        if self.kind == "NotImplementedError":
            return f"`{name}` is not implemented yet (it raises NotImplementedError)."
        if self.kind in {"returned", "crash", "timeout", "missing", "too_large"}:
            return self.message
        return f"`{name}` raised {self.kind}: {self.message}"


Outputs = Arrays | StudentError


class UnusableOutput(TypeError):
    pass


def to_array(value: Any) -> np.ndarray:
    """A plain numeric array from whatever the student returned (tensor, array, list)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise UnusableOutput(f"returned {type(value).__name__}, not a tensor of numbers")
    return array


def outputs_of(exercise: Probed, impl: Any, inputs: Arrays) -> Arrays:
    """Run the exercise's probe on `impl` (the student's, the reference, or a mistake)."""
    return {k: to_array(v) for k, v in exercise.probe(impl, inputs).items()}


class _TorchTripwire(TorchFunctionMode):
    """Sees every torch function call, `torch.ops.aten.native_layer_norm(...)` included."""

    def __init__(self, names: frozenset[str], seen: set[str]):
        super().__init__()
        self.names, self.seen = names, seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.names:
            self.seen.add(func.__name__)
        return func(*args, **(kwargs or {}))


# The course's own implementations: the demos' package and the graded references.
COURSE_PACKAGES = ("norm_utils", "grader.reference")


def _reference_calls(names: frozenset[str], seen: set[str]):
    """A profile hook noting calls into the course's versions of the forbidden functions."""

    def hook(frame, event, arg):
        module = frame.f_globals.get("__name__", "")
        if event == "call" and module.startswith(COURSE_PACKAGES) and frame.f_code.co_name in names:
            seen.add(f"{module}.{frame.f_code.co_name}")

    return hook


@contextmanager
def tripwires(exercise: Probed) -> Iterator[set[str]]:
    """Note every forbidden library call made inside the block into the yielded set."""
    names, seen = frozenset(exercise.forbidden), set()
    previous = sys.getprofile()
    sys.setprofile(_reference_calls(names | {exercise.name}, seen))
    try:
        with _TorchTripwire(names, seen):
            yield seen
    finally:
        sys.setprofile(previous)


def call(exercise: Probed, answer: Any, inputs: Arrays) -> tuple[Outputs, set[str]]:
    """Run the exercise's probe on the student's answer; return its outputs and forbidden calls."""
    with tripwires(exercise) as seen:
        module = getattr(answer, "__module__", None) or ""
        if module.startswith(COURSE_PACKAGES):
            seen.add(f"{module}.{getattr(answer, '__name__', exercise.name)}")
        try:
            outputs: Outputs = outputs_of(exercise, answer, inputs)
        except UnusableOutput as error:
            outputs = StudentError("returned", f"`{exercise.name}` {error}.")
        except Exception as error:
            outputs = StudentError(type(error).__name__, str(error)[:300] + where(error))
    return outputs, seen


# Code that is not the student's: the libraries (torch, numpy, the standard library, whatever is
# installed beside them) and this package, wherever they are installed.
_NOT_THE_STUDENTS = tuple(
    {str(Path(m.__file__).resolve().parent) for m in (np, torch, os, sys.modules[__name__])}
    | {str(Path(sysconfig.get_path(p)).resolve()) for p in ("purelib", "platlib", "stdlib")}
)


def where(error: BaseException) -> str:
    """' (line 5 of your cell: `y = x @ w`)': the last line of the student's own code the
    error passed through; '' when none is known."""
    found = None
    for frame, line in traceback.walk_tb(error.__traceback__):
        name = frame.f_code.co_filename
        if not str(Path(name).resolve()).startswith(_NOT_THE_STUDENTS):
            found = (name, line)
    if found is None:
        return ""
    text = linecache.getline(*found).strip()
    return f" (line {found[1]} of your cell" + (f": `{text[:120]}`)" if text else ")")


def load_answer(setup: str, source: str, name: str) -> Any:
    """Execute the setup and the answer cell in a fresh namespace; return the object `name`."""
    namespace: dict[str, Any] = {"__name__": "__answer__"}
    exec(compile(setup, "<setup>", "exec"), namespace)
    cell = f"<answer {name}>"
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)  # for `where`
    exec(compile(source, cell, "exec"), namespace)
    if name not in namespace:
        raise NameError(f"the answer cell does not define `{name}`")
    return namespace[name]


def tensors(inputs: Arrays, *names: str) -> list[torch.Tensor | None]:
    """Tensors for the named inputs, None for those absent (an optional argument left out)."""
    return [torch.from_numpy(inputs[n].copy()) if n in inputs else None for n in names]


def shape_argument(value: np.ndarray) -> int | tuple[int, ...]:
    """A `normalized_shape` as the case gives it: a 0-d array is the int form (`LayerNorm(D)`),
    a 1-d array the tuple form; the exercises promise both."""
    return int(value) if value.ndim == 0 else tuple(int(d) for d in value)


def trailing_dims(normalized_shape: int | tuple[int, ...]) -> tuple[int, ...]:
    """The dims a `normalized_shape` (int or tuple) covers, counted from the end."""
    count = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    return tuple(range(-count, 0))

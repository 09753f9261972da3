"""The student's side of a check: call the answer on given inputs, return plain arrays.

This module runs wherever the student's code runs (their kernel, or the grading sandbox). It
trusts nothing the answer returns beyond converting it to numbers, and it records any call to a
library normalization the exercise forbids, so that a run-time use can be reported even when
the source hides it from the static scan.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from grader.checks.core import Arrays, Exercise, Outputs, StudentError, UnusableOutput, outputs_of


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
def tripwires(exercise: Exercise) -> Iterator[set[str]]:
    """Note every forbidden library call made inside the block into the yielded set."""
    names, seen = frozenset(exercise.forbidden), set()
    previous = sys.getprofile()
    sys.setprofile(_reference_calls(names | {exercise.name}, seen))
    try:
        with _TorchTripwire(names, seen):
            yield seen
    finally:
        sys.setprofile(previous)


def call(exercise: Exercise, answer: Any, inputs: Arrays) -> tuple[Outputs, set[str]]:
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
            outputs = StudentError(type(error).__name__, str(error)[:300])
    return outputs, seen


def load_answer(setup: str, source: str, name: str) -> Any:
    """Execute the setup and the answer cell in a fresh namespace; return the object `name`."""
    namespace: dict[str, Any] = {"__name__": "__answer__"}
    exec(compile(setup, "<setup>", "exec"), namespace)
    exec(compile(source, f"<answer {name}>", "exec"), namespace)
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

"""Make the library's own implementations of an exercise fail loudly, before the answer runs.

An exercise that asks for an implementation forbids the library's (`F.layer_norm`, and every
sibling that computes the same thing after a reshape). Noting calls from inside the student's
process can be switched off from there; this module instead takes the implementations away, in
the forked process that runs one exercise, so that whatever route the answer takes, the call
raises `ForbiddenCall` naming the function and saying to implement it:

- Operators, at PyTorch's dispatcher: every kernel an operator has (CPU, nested, mkldnn,
  quantized, the composite and autograd ones), for every overload, is replaced by one that
  raises. The dispatcher is shared by every thread and every way in: `F.*`, `nn.Module`s,
  `torch.ops.aten.*`, TorchScript, `torch.compile`'s compiled code, `vmap`. Meta kernels are
  kept: they compute shapes only, never values.
- Pure-Python implementations (`torch._refs`, `torch._decomp`, `grader.reference`): each function's
  code is replaced in place, so every name, table entry and wrapper that holds the function
  holds the refusal; the original code is dropped.

What stays reachable from student code, and why that gives nothing back: the registrations are
held by a `torch._C._DispatchModule` whose only reference is leaked on purpose (a pybind object
the garbage collector does not track, so `gc.get_objects()` and `gc.get_referrers()` never list
it, and it can never be destroyed, which would restore the kernels). The refusing kernels and
the poisoned functions are ordinary Python objects `gc` lists; rewriting them changes what a
refusal does, not what it can reach, since the library's code they replaced is gone from the
process. A module whose functions were poisoned can be executed afresh from its source file
(by re-importing it), which is the same as copying that source into the answer.

It imports only the standard library and torch: it runs in the student's process.
"""

from __future__ import annotations

import ctypes
import importlib
import inspect
import types
import warnings
from collections.abc import Iterable

import torch

__all__ = ["ForbiddenCall", "attempted", "block"]

# Every dispatch key that can hold a kernel computing values for a CPU tensor (aliases included:
# CompositeImplicitAutograd decomposes, CompositeExplicitAutograd serves keys with no kernel of
# their own, Autograd wraps the backend). Meta computes shapes only and is left alone.
KERNEL_KEYS = (
    "CPU",
    "MkldnnCPU",
    "NestedTensorCPU",
    "QuantizedCPU",
    "SparseCPU",
    "SparseCsrCPU",
    "CompositeImplicitAutograd",
    "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
    "Autograd",
)


class ForbiddenCall(RuntimeError):
    """A library implementation the exercise asks the student to write was called."""


_attempts: set[str] = set()


def attempted() -> frozenset[str]:
    """The blocked functions called so far in this process, even when the answer caught the
    error (and so returned something else)."""
    return frozenset(_attempts)


def _refuse(name: str):
    _attempts.add(name)
    raise ForbiddenCall(
        f"{name} is the library's own implementation of what this exercise asks you to write; "
        "it is blocked while your answer is graded: implement it yourself from tensor "
        "operations (mean, sum, sqrt, ...)"
    )


def _operator_kernel(name: str):
    def refuse(*args, **kwargs):
        _refuse(name)

    return refuse


def _overloads(qualified: str) -> list[str]:
    """'aten::var' -> ['var', 'var.dim', ...]; [] when this build of torch lacks the operator."""
    namespace, name = qualified.split("::")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return []
    return [name if o == "default" else f"{name}.{o}" for o in packet.overloads()]


def _block_operators(operators: Iterable[str]) -> None:
    libraries: dict[str, object] = {}
    for qualified in operators:
        namespace = qualified.split("::")[0]
        if namespace not in libraries:
            libraries[namespace] = torch._C._dispatch_library("IMPL", namespace, "", __file__, 0)
        module = libraries[namespace]
        for overload in _overloads(qualified):
            kernel = _operator_kernel(f"torch.ops.{namespace}.{overload}")
            for key in KERNEL_KEYS:
                if torch._C._dispatch_has_kernel_for_dispatch_key(f"{namespace}::{overload}", key):
                    with warnings.catch_warnings():  # "overriding a previously registered kernel"
                        warnings.simplefilter("ignore")
                        module.impl(overload, key, kernel, False)
    for module in libraries.values():
        # Leak the one reference: destroying the module would restore the library's kernels.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(module))


class _Refusal:
    """Planted as a constant in a poisoned function's code: what the code calls instead."""

    def __init__(self, name: str):
        self.name = name

    def refuse(self):
        _refuse(self.name)


def _template(*args, **kwargs):
    return "refusal".refuse()  # the constant "refusal" becomes a _Refusal in each copy


def _poison(function: types.FunctionType, name: str) -> None:
    """Replace the function's code (in place: every reference sees it) with a refusal. The
    refusal keeps the function's free variables (a method's `__class__`, a wrapper's cells),
    which Python requires of a replacement, and never reads them."""
    consts = tuple(_Refusal(name) if c == "refusal" else c for c in _template.__code__.co_consts)
    function.__code__ = _template.__code__.replace(
        co_consts=consts,
        co_freevars=function.__code__.co_freevars,
        co_name=function.__name__,
        co_qualname=function.__qualname__,
    )


def _resolve(path: str):
    """The object at 'module:qualified.name' ('torch._refs:native_layer_norm',
    'torch.nn:TransformerEncoderLayer.forward'); None if absent."""
    module_name, _, qualified = path.partition(":")
    try:
        found = importlib.import_module(module_name)
        for attribute in qualified.split("."):
            found = inspect.getattr_static(found, attribute)
    except (ImportError, AttributeError):
        return None
    return found


def _python_implementations(operators: Iterable[str]) -> dict[str, types.FunctionType]:
    """The pure-Python decompositions torch holds for the operators' overloads, by name."""
    from torch._decomp import global_decomposition_table

    found = {}
    for qualified in operators:
        namespace = qualified.split("::")[0]
        for overload in _overloads(qualified):
            packet, _, variant = overload.partition(".")
            op = getattr(getattr(getattr(torch.ops, namespace), packet), variant or "default")
            for table in global_decomposition_table.values():
                if isinstance(table.get(op), types.FunctionType):
                    found[f"{table[op].__module__}:{table[op].__qualname__}"] = table[op]
    return found


def _poison_chain(function, name: str) -> None:
    """The function and every function it wraps (decorators keep them in `__wrapped__`)."""
    while isinstance(function, types.FunctionType):
        _poison(function, name)
        function = inspect.getattr_static(function, "__wrapped__", None)


def block(operators: Iterable[str] = (), python: Iterable[str] = ()) -> None:
    """Make the named library implementations raise ForbiddenCall in this process, for good.

    Args:
        operators: dispatcher operators ("aten::native_layer_norm"), each with all its
            overloads; their Python decompositions in `torch._decomp` are poisoned too.
        python: pure-Python functions and methods, as "module:qualified.name"
            ("grader.reference.functional:_moments", "torch.nn:TransformerEncoderLayer.forward").
    """
    operators = tuple(operators)
    targets = {path: _resolve(path) for path in python}  # imports their modules first, so the
    targets.update(_python_implementations(operators))  # decompositions they register are seen
    for path, function in targets.items():
        _poison_chain(function, path.replace(":", "."))
    _block_operators(operators)

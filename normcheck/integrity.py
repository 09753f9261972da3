"""Static integrity scan of an answer's source: does it call the library where it must build?

Runs in the grader's process on the submitted text, so nothing the student's code does at run
time can hide from it. `probe.call` adds the run-time view. The student's own `check()` runs the
same scan, so it imports nothing of the checks (an exercise is anything with a `name` and the
`forbidden` names).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.grading.sandboxed.calling import Probed as Exercise

# Ways of calling code that a static reading cannot follow, or of reaching into the grader.
# No exercise of this course needs any of them; an answer that uses one earns no points.
DYNAMIC_CALLS = {"eval", "exec", "compile", "__import__", "globals", "vars"}
TAMPERING = {
    "setprofile",
    "settrace",
    "_pop_torch_function_stack",
    "_push_on_torch_function_stack",
    "_set_torch_function_mode",
}
OFF_LIMITS_MODULES = ("grader", "normcheck", "importlib", "ctypes", "gc", "inspect", "builtins")
# Ways of reaching an attribute by a name that is not written out: a namespace's dict (the
# builtins' too), the lookup itself, and the operator module's getters. No answer needs them.
NAMELESS_LOOKUPS = {"__dict__", "__builtins__", "__getattribute__", "attrgetter", "methodcaller"}
ATTRIBUTE_BUILTINS = {"getattr", "setattr", "delattr", "hasattr"}
# torch's own Python implementations of its operators, normalizations among them, and their
# private helpers: an answer has no use for them.
TORCH_INTERNALS = {"_refs", "_decomp", "_prims", "_prims_common"}


def _computed_attribute(node: ast.Call) -> bool:
    """getattr/setattr/hasattr whose attribute name is not written out."""
    name = node.func.id if isinstance(node.func, ast.Name) else ""
    return (
        name in ATTRIBUTE_BUILTINS
        and len(node.args) >= 2
        and not isinstance(node.args[1], ast.Constant)
    )


def _nameless_lookups(tree: ast.AST) -> list[ast.AST]:
    """Each lookup of an attribute by a name the source does not write out: a namespace's
    `__dict__`, `__getattribute__`, the operator module's getters, and getattr and its kin, and
    the dynamic calls, used as values (`g = getattr`, `map(eval, …)`) rather than called, which
    `_computed_attribute` and `hidden_calls` cannot follow."""
    called = {
        id(node.func)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
        dynamic = isinstance(node, ast.Name) and name in DYNAMIC_CALLS  # not `model.eval`
        as_value = (name in ATTRIBUTE_BUILTINS or dynamic) and id(node) not in called
        if name in NAMELESS_LOOKUPS or as_value:
            found.append(node)
        elif isinstance(node, ast.alias) and node.name in NAMELESS_LOOKUPS:
            found.append(node)
    return found


def _off_limits_imports(node: ast.Import | ast.ImportFrom) -> list[str]:
    """Each import of the grader, of a module that reaches into Python's machinery, or of
    torch's internals, as written."""
    if isinstance(node, ast.Import):
        imported = [(f"import {a.name}", a.name) for a in node.names]
    else:
        module = node.module or ""
        imported = [(f"from {module} import {a.name}", f"{module}.{a.name}") for a in node.names]
    return [
        text
        for text, dotted in imported
        if dotted.split(".")[0] in OFF_LIMITS_MODULES or TORCH_INTERNALS & set(dotted.split("."))
    ]


def hidden_calls(tree: ast.AST) -> list[str]:
    """Dynamic calls, attributes looked up by names not written out, tripwire tampering, imports
    of the grader, and torch's internals."""
    found = [
        f"{ast.unparse(node) if not isinstance(node, ast.alias) else node.name} "
        f"(line {getattr(node, 'lineno', 0)})"
        for node in _nameless_lookups(tree)
    ]
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_CALLS)
            or _computed_attribute(node)
        ):
            found.append(f"{ast.unparse(node.func)}(…) (line {line})")
        elif isinstance(node, ast.Attribute) and node.attr in TAMPERING | TORCH_INTERNALS:
            found.append(f"{ast.unparse(node)} (line {line})")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found += [f"{text} (line {line})" for text in _off_limits_imports(node)]
        elif isinstance(node, ast.Constant) and TORCH_INTERNALS & set(str(node.value).split(".")):
            found.append(f"{node.value!r} (line {line})")  # sys.modules["torch._refs"]
    return found


def forbidden_uses(source: str, exercise: Exercise) -> list[str]:
    """Each forbidden use in `source` as 'name (line n)'; empty when the answer builds its own."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # what a source can make it
        return []  # a syntax error is reported by running the code, with its own message
    banned = set(exercise.forbidden)
    found: list[str] = hidden_calls(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in banned:
            found.append(f"{ast.unparse(node)} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                if alias.name in banned or (module.startswith("norm_utils") and alias.name == "*"):
                    found.append(f"from {module} import {alias.name} (line {node.lineno})")
        elif isinstance(node, ast.Constant) and node.value in banned:
            # getattr(F, "layer_norm") and friends
            found.append(f"{node.value!r} (line {node.lineno})")
    return found


def integrity_message(exercise: Exercise, static: list[str], runtime: set[str]) -> str:
    """Why the exercise earns nothing, or '' when it is the student's own work."""
    uses = static + sorted(runtime - {u.split(" ")[0] for u in static})
    if not uses:
        return ""
    return (
        f"`{exercise.name}` uses the library's own implementation or hides what it calls "
        f"({', '.join(uses)}); this exercise asks you to build it yourself from tensor "
        "operations, with direct calls, so it earns no points."
    )

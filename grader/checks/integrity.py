"""Static integrity scan of an answer's source: does it call the library where it must build?

Runs in the grader's process on the submitted text, so nothing the student's code does at run
time can hide from it. `probe.call` adds the run-time view.
"""

from __future__ import annotations

import ast

from grader.checks.core import Exercise


def forbidden_uses(source: str, exercise: Exercise) -> list[str]:
    """Each forbidden use in `source` as 'name (line n)'; empty when the answer builds its own."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # a syntax error is reported by running the code, with its own message
    banned = set(exercise.forbidden)
    found: list[str] = []
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
        f"`{exercise.name}` uses the library's own implementation ({', '.join(uses)}); "
        "this exercise asks you to build it from tensor operations, so it earns no points."
    )

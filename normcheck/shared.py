"""What normcheck shares with the grader: how an answer is called and what comes back, the probes
of `grader.grading.sandboxed`.

The student's wheel carries them inside this package, as `normcheck.sandboxed` (their modules
import each other relatively, so they work under either name); where the course itself is
installed, they are the grader's, so that the grader and `check()` judge the very same types.
"""

from __future__ import annotations

from importlib.util import find_spec

if find_spec("normcheck.sandboxed") is not None:
    from normcheck.sandboxed.calling import Arrays, Outputs, StudentError, call
    from normcheck.sandboxed.probes import ALONE, PROBES
else:
    from grader.grading.sandboxed.calling import Arrays, Outputs, StudentError, call
    from grader.grading.sandboxed.probes import ALONE, PROBES

__all__ = ["ALONE", "PROBES", "Arrays", "Outputs", "StudentError", "call"]

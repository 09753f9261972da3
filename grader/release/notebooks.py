"""Generate the student release from the solutions (solutions/): the notebooks (notebooks/), with
nbgrader, and their visible checks' inputs and expected outputs (normcheck/data/), which the
student's `check()` judges against."""

from __future__ import annotations

import base64
import filecmp
import hashlib
import importlib.metadata
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from nbgrader.apps import NbGraderAPI

from grader.checks import EXERCISES, prepared
from grader.course.config import (
    RELEASE,
    REPO,
    SOLUTIONS,
    assignments,
    course_config,
    use_this_environment,
)
from grader.course.intake import exercises_of, source_notebook
from normcheck import expected


class ReleaseError(RuntimeError):
    pass


def _fresh_checks(target: Path, source: Path) -> None:
    for assignment in assignments(source):
        exercises = []
        for name in exercises_of(source_notebook(assignment, source)):
            ready = prepared(name, hidden=False, seed=0)
            cases = [(c, i, e) for (c, i), e in zip(ready.planned, ready.expected, strict=True)]
            exercises.append((EXERCISES[name], cases))
        expected.write(target, assignment, exercises)


def _stale_checks(fresh: Path, kept: Path) -> list[str]:
    """The stored checks' files of `kept` that are not those of `fresh` (up to rounding), both
    files of a notebook together."""
    names = {p.stem for p in fresh.glob("*.json")} | {p.stem for p in kept.glob("*.json")}
    stale = [n for n in names if not expected.same(kept / f"{n}.json", fresh / f"{n}.json")]
    return sorted(f"{kept.name}/{n}{suffix}" for n in stale for suffix in (".json", ".npz"))


def write_checks(target: Path = expected.DATA, source: Path = SOLUTIONS) -> None:
    """Write each assignment's visible checks as data under `target` (normcheck.expected): a
    notebook's files are rewritten only when their checks changed, not their rounding, so that
    a release on another machine changes nothing."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch)
        _fresh_checks(fresh, source)
        target.mkdir(parents=True, exist_ok=True)
        for stale in _stale_checks(fresh, target):
            name = Path(stale).name
            (target / name).unlink(missing_ok=True)
            if (fresh / name).is_file():
                shutil.copyfile(fresh / name, target / name)


def generate(
    target: Path = RELEASE,
    db: Path | None = None,
    source: Path = SOLUTIONS,
    checks: Path = expected.DATA,
) -> None:
    """Write every assignment's student version of `source` under `target`, and its visible
    checks under `checks`; record it in gradebook `db`.

    Without `db` the gradebook is a throwaway: the release itself needs none.
    """
    write_checks(checks, source)
    use_this_environment()
    with tempfile.TemporaryDirectory() as scratch:
        config = course_config(root=Path(scratch), db=db, release=target, source=source)
        api = NbGraderAPI(config=config)
        for assignment in assignments(source):
            result = api.generate_assignment(assignment, force=True, create=True)
            if not result["success"]:
                raise ReleaseError(f"{assignment}: {result.get('error') or result.get('log')}")


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()}


def _differing(fresh: Path, kept: Path) -> list[str]:
    names = _files(fresh) | (_files(kept) if kept.exists() else set())
    return sorted(
        str(Path(kept.name) / n)
        for n in names
        if not ((fresh / n).is_file() and (kept / n).is_file())
        or not filecmp.cmp(fresh / n, kept / n, shallow=False)
    )


def stale_files(
    release: Path = RELEASE, source: Path = SOLUTIONS, checks: Path = expected.DATA
) -> list[str]:
    """Files of the release (notebooks and checks' data) that differ from a fresh generation,
    or exist on one side only."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh, fresh_checks = Path(scratch) / "notebooks", Path(scratch) / "data"
        generate(fresh, source=source, checks=fresh_checks)
        return _differing(fresh, release) + _stale_checks(fresh_checks, checks)


# --- the students' wheel: what the released notebooks import, and no answer ----------------------

STUDENT_DISTRIBUTION = "normalization_course_student"
# wheel path -> source path, relative to the checkout (or an installed course's site-packages):
# the student's check with its stored data, the probes it calls answers with (the grader's own,
# which import each other relatively), and the demos' package.
_STUDENT_FILES = {
    "normcheck": ("normcheck", ("*.py", "data/*.json", "data/*.npz")),
    "normcheck/sandboxed": ("grader/grading/sandboxed", ("__init__.py", "probe.py", "probes.py")),
    "norm_utils": ("norm_utils", ("*.py",)),
}
_REQUIREMENTS = ("torch", "numpy", "matplotlib", "scikit-learn")  # scikit-learn: 05's digits


def _student_files(root: Path = REPO) -> dict[str, bytes]:
    files = {}
    for target, (folder, patterns) in _STUDENT_FILES.items():
        for pattern in patterns:
            for path in sorted((root / folder).glob(pattern)):
                files[f"{target}/{path.relative_to(root / folder).as_posix()}"] = path.read_bytes()
    return files


def _metadata(version: str) -> str:
    """The wheel's METADATA: the course's own pins of what the notebooks import."""
    requirements = [
        r
        for r in importlib.metadata.requires("normalization-course") or ()
        if re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] in _REQUIREMENTS
    ]
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {STUDENT_DISTRIBUTION.replace('_', '-')}",
        f"Version: {version}",
        "Summary: The normalization course's notebooks' imports for students: the demos' "
        "package and the visible checks, with no answer in them.",
        "Requires-Python: >=3.11",
        *(f"Requires-Dist: {r}" for r in requirements),
    ]
    return "\n".join(lines) + "\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def student_wheel(folder: Path, root: Path = REPO) -> Path:
    """Build the students' wheel into `folder` (made if missing) and return its path: the
    packages the released notebooks import (`normcheck`, `norm_utils`), byte for byte the same
    from the same sources (pip installs it like any wheel: `pip install <wheel>`)."""
    version = importlib.metadata.version("normalization-course")
    info = f"{STUDENT_DISTRIBUTION}-{version}.dist-info"
    files = _student_files(root)
    files[f"{info}/METADATA"] = _metadata(version).encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: grader.release\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{info}/top_level.txt"] = b"norm_utils\nnormcheck\n"
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{STUDENT_DISTRIBUTION}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return wheel

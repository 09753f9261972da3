"""The visible checks as data: their fixed inputs and what those inputs should give.

`grader release` writes, for each notebook, `data/<notebook>.json` (each exercise: how to call
it, what it may not call, each visible check's words, points and tolerance, the known mistakes'
names and messages) and `data/<notebook>.npz` (each check's inputs, the reference's outputs and
each known mistake's outputs on them: plain arrays, read without pickle). The student's `check()`
judges an answer against them with the grader's own judge; no reference, known mistake's code or
hidden check is in them. The JSON is written byte for byte the same from the same checks; the
arrays are the same up to rounding (a reduction's last bits depend on the CPU and the thread
count), so two releases are compared by `same`, which a test uses to tell when the stored checks
drift from the checks.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from normcheck import folding, gradients, properties, structure
from normcheck.judge import Expected, Structure
from normcheck.shared import PROBES, Arrays

DATA = Path(__file__).resolve().parent / "data"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # every archive member's date: the same bytes on every release


@dataclass(frozen=True)
class Rule:
    """A visible check as the judge reads it (see normcheck.judge.Rule)."""

    description: str
    points: float
    rtol: float
    atol: float
    refusal: str = ""
    hidden: bool = False


@dataclass(frozen=True)
class Known:
    """A known mistake, by its name and its message to the student: never its code."""

    name: str
    message: str
    structural: bool = False  # a wrong structure: the exercise is capped


@dataclass(frozen=True)
class Case:
    rule: Rule
    inputs: Arrays
    expected: Expected


@dataclass(frozen=True)
class Exercise:
    """An exercise as the student's `check()` knows it."""

    name: str
    probe: Any
    forbidden: tuple[str, ...]
    properties: tuple[Any, ...]
    cases: tuple[Case, ...]
    structure: Structure | None = None


# --- properties by address: a value of one of the property modules by name, or a class and its
# fields (the modules hold every property the checks use; a test fails when one is left out)

PROPERTY_MODULES = {
    "properties": properties,
    "gradients": gradients,
    "structure": structure,
    "folding": folding,
}


def _address(prop: Any) -> dict | None:
    """Where `prop` is found in the property modules; None if it is in none of them."""
    for module, namespace in PROPERTY_MODULES.items():
        for name, value in vars(namespace).items():
            if value is prop:
                return {"module": module, "name": name}
            if isinstance(value, tuple):
                for index, item in enumerate(value):
                    if item is prop:
                        return {"module": module, "name": name, "index": index}
        cls = type(prop)
        if is_dataclass(prop) and getattr(namespace, cls.__name__, None) is cls:
            values = asdict(prop)
            if all(isinstance(v, str | int | float | bool) for v in values.values()):
                return {"module": module, "class": cls.__name__, "fields": values}
    return None


def _resolve(address: dict) -> Any:
    namespace = PROPERTY_MODULES[address["module"]]
    if "class" in address:
        return getattr(namespace, address["class"])(**address["fields"])
    value = getattr(namespace, address["name"])
    return value[address["index"]] if "index" in address else value


def addresses(props: tuple[Any, ...]) -> list[dict]:
    """Each property's address; raises ValueError for one the student's check could not find."""
    found = [_address(p) for p in props]
    lost = [p for p, a in zip(props, found, strict=True) if a is None]
    if lost:
        raise ValueError(
            f"{lost[0]!r} is not a value of {', '.join(f'normcheck.{m}' for m in PROPERTY_MODULES)}"
            ": the student's check could not use it (name it there)"
        )
    return found


# --- writing


def _archive(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz of `arrays`, members stored in the given order with a fixed date."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for key, array in arrays.items():
            member = zipfile.ZipInfo(f"{key}.npy", date_time=_EPOCH)
            member.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(member, "w") as out:
                np.lib.format.write_array(out, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def _key(exercise: str, case: int, part: str, name: str) -> str:
    return json.dumps([exercise, case, part, name])  # output names hold spaces, colons, dots


Planned = list[tuple[Any, Arrays, Expected]]  # (a check, its inputs, what they should give)


def encode(exercises: Iterable[tuple[Any, Planned]]) -> tuple[str, bytes]:
    """The JSON text and .npz bytes of `exercises`: each a `grader.checks.core.Exercise` with
    its visible checks, their inputs and what those should give."""
    meta, arrays = {}, {}
    for exercise, planned in exercises:
        mistakes = list(exercise.mistakes)
        checks = []
        for i, (check, inputs, expected) in enumerate(planned):
            rule = Rule(
                check.description, check.points, check.rtol, check.atol, check.refusal, False
            )
            ran = []
            for part, outputs in (("in", inputs), ("want", expected.want)):
                arrays |= {_key(exercise.name, i, part, k): v for k, v in outputs.items()}
            for mistake, outputs in expected.mistakes:
                j = mistakes.index(mistake)
                ran.append(j)
                arrays |= {_key(exercise.name, i, f"mistake {j}", k): v for k, v in outputs.items()}
            checks.append({**asdict(rule), "mistakes": ran})
        meta[exercise.name] = {
            "probe": exercise.probe.__name__,
            "forbidden": list(exercise.forbidden),
            "properties": addresses(exercise.properties),
            "mistakes": [
                {"name": m.name, "message": m.message, "structural": m.structural} for m in mistakes
            ],
            "structure": asdict(exercise.structure) if exercise.structure else None,
            "checks": checks,
        }
    return json.dumps(meta, indent=1, ensure_ascii=False) + "\n", _archive(arrays)


def write(folder: Path, notebook: str, exercises: Iterable[tuple[Any, Planned]]) -> list[Path]:
    """Write `notebook`'s exercises' visible checks into `folder`; returns the files written."""
    text, archive = encode(exercises)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{notebook}.json").write_text(text, encoding="utf-8")
    (folder / f"{notebook}.npz").write_bytes(archive)
    return [folder / f"{notebook}.json", folder / f"{notebook}.npz"]


# --- comparing: the same checks, up to the rounding of the machine that computed them
#
# A stored array is computed on the author's CPU; another CPU (vendor, SIMD level, thread count)
# rounds reductions, matrix products and transcendentals differently: by a few units in the last
# place of each value, or, where a value is a difference of near equal terms, by the terms'
# rounding (float64 outputs of ~1e-16 moved by ~1e-14 on an Intel CPU). Two releases hold the
# same checks when every value agrees within the larger of two allowances: a few ulps of its
# dtype, and a share of what the judge itself allows (which covers the terms' rounding, and on
# which no verdict can turn). A change the judge could see is stale.

ROUNDING_ULPS = 32  # a reduction's reordering, in ulps of the value's own dtype and magnitude
TOLERANCE_SHARE = 0.1  # of the judge's allowance, atol + rtol·|want| (normcheck.judge.margin)


def allowance(stored: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """How far each value of the float array `stored` may move and still be the same check."""
    magnitude = np.abs(stored)
    rounding = ROUNDING_ULPS * np.finfo(stored.dtype).eps * magnitude
    return np.maximum(rounding, TOLERANCE_SHARE * (atol + rtol * magnitude))


def _close(one: np.ndarray, other: np.ndarray, rtol: float, atol: float) -> bool:
    if one.dtype != other.dtype or one.shape != other.shape:
        return False
    if not np.issubdtype(one.dtype, np.floating):
        return np.array_equal(one, other)
    finite = np.isfinite(one)
    if not np.array_equal(finite, np.isfinite(other)):
        return False
    if not np.array_equal(one[~finite], other[~finite], equal_nan=True):
        return False
    allowed = allowance(one, rtol, atol)[finite]
    return bool(np.all(np.abs(one[finite] - other[finite]) <= allowed))


def rule_of(meta: dict, key: str) -> tuple[float, float]:
    """The (rtol, atol) of the check an array's `key` belongs to, from its notebook's JSON."""
    exercise, case, _, _ = json.loads(key)
    check = meta[exercise]["checks"][case]
    return check["rtol"], check["atol"]


def same(one: Path, other: Path) -> bool:
    """Whether two stored notebooks' checks (their .json paths) are the same: the same text, and
    the same arrays up to the rounding of another CPU (see ROUNDING_ULPS, TOLERANCE_SHARE)."""
    paths = (one, other, one.with_suffix(".npz"), other.with_suffix(".npz"))
    if not all(p.is_file() for p in paths) or one.read_bytes() != other.read_bytes():
        return False
    meta = json.loads(one.read_text(encoding="utf-8"))
    with (
        np.load(one.with_suffix(".npz"), allow_pickle=False) as a,
        np.load(other.with_suffix(".npz"), allow_pickle=False) as b,
    ):
        return same_arrays(meta, a, b)


def same_arrays(meta: dict, one: Mapping[str, np.ndarray], other: Mapping[str, np.ndarray]) -> bool:
    """Whether two notebooks' arrays (under the checks `meta` describes) are the same up to the
    rounding of another CPU: the same keys, each pair `_close` under its check's rule."""
    return list(one.keys()) == list(other.keys()) and all(
        _close(one[k], other[k], *rule_of(meta, k)) for k in one.keys()
    )


# --- reading


def _parts(arrays: dict[str, np.ndarray]) -> dict[tuple[str, int, str], Arrays]:
    grouped: dict[tuple[str, int, str], Arrays] = {}
    for key, array in arrays.items():
        exercise, case, part, name = json.loads(key)
        grouped.setdefault((exercise, case, part), {})[name] = array
    return grouped


def _exercise(name: str, meta: dict, parts: dict[tuple[str, int, str], Arrays]) -> Exercise:
    known = [Known(**m) for m in meta["mistakes"]]
    cases = []
    for i, check in enumerate(meta["checks"]):
        ran = check.pop("mistakes")
        expected = Expected(
            parts.get((name, i, "want"), {}),
            tuple((known[j], parts.get((name, i, f"mistake {j}"), {})) for j in ran),
        )
        cases.append(Case(Rule(**check), parts.get((name, i, "in"), {}), expected))
    return Exercise(
        name,
        PROBES[meta["probe"]],
        tuple(meta["forbidden"]),
        tuple(_resolve(a) for a in meta["properties"]),
        tuple(cases),
        Structure(**meta["structure"]) if meta["structure"] else None,
    )


def load(notebook_json: Path) -> dict[str, Exercise]:
    """The exercises of one notebook's stored checks."""
    meta = json.loads(notebook_json.read_text(encoding="utf-8"))
    with np.load(notebook_json.with_suffix(".npz"), allow_pickle=False) as data:
        parts = _parts({key: data[key] for key in data.files})
    return {name: _exercise(name, m, parts) for name, m in meta.items()}


def stored(folder: Path = DATA) -> dict[str, Exercise]:
    """Every exercise of every notebook stored in `folder`."""
    found: dict[str, Exercise] = {}
    for path in sorted(folder.glob("*.json")):
        found |= load(path)
    return found

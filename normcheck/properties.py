"""What a wrong output gets wrong, measured on the output itself, when no known mistake matches.

A normalization's output has one property that survives any input: in every set of values that
shares one statistic (a row over `normalized_shape`, a group, a channel across the batch), the
output before its affine has mean 0 and a fixed spread. A family of exercises declares how its
outputs split into those sets (`Normalized`); `explain` measures the student's output set by set
and says which property fails, where and by how much ("rows 0–3 have mean 0.41 over the
normalized dims, not 0"). A gradient satisfies the invariances of its function instead
(`Invariant`: LayerNorm's grad_x sums to 0 over a row, and is orthogonal to x − μ), and any
output that is the correct one scaled or shifted is said to be. A running statistic is an
exponential moving average (`RunningAverage`: which weight, old or new, is off), a variance is
never negative, 0 on constant values and smallest about the mean (`variance`). Any output also
tells by its shape which dims were reduced (read against the inputs' shapes, `shape_sentence`),
by NaN where the correct output is finite that a root or a division went wrong, and by a factor
that changes from row to row that a per-row factor is. It reports only statistics of the
student's own output and ratios to a correct output, never an input or an expected value.
Outputs with no such property still get where and how much they differ (`extent`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from grader.grading.sandboxed.calling import Arrays


class Structural(str):
    """A finding that the answer is built wrong (statistics over other sets of values, samples
    mixed across the batch, a norm reading the wrong tensor), not merely off: a str like every
    finding, which the verdict reads to cap the exercise (`core.Structure`)."""


# An output and the check's inputs -> a (sets, values) array, each row one set of values that
# share a statistic, before the affine; None when that view does not apply to these inputs.
Grouping = Callable[[np.ndarray, dict[str, np.ndarray]], "np.ndarray | None"]


@dataclass(frozen=True)
class Normalized:
    """Outputs whose key starts with `key` are normalized per set of values."""

    key: str
    unit: str  # what one set is called: "row", "group", "channel"
    over: str  # the sets in words: "over the normalized_shape dims"
    sets: Grouping
    # Other sets a wrong answer may have normalized instead: (words, grouping).
    instead: tuple[tuple[str, Grouping], ...] = ()
    centered: bool = True  # False: RMSNorm, which rescales without subtracting the mean

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
        return _sentence(self, key, inputs, got, want)


class Property(Protocol):
    """What a correct output always satisfies: outputs whose key starts with `key` are measured
    by `sentence`, which says in the course's words what a wrong one violates ('' if nothing)."""

    key: str

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str: ...


Sentence = Callable[[str, "Arrays", np.ndarray, np.ndarray], str]


@dataclass(frozen=True)
class SentenceProperty:
    """A property with nothing to set: `says` is its sentence about outputs starting with `key`."""

    key: str
    says: Sentence

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
        return self.says(key, inputs, got, want)


def sentence_for(key: str) -> Callable[[Sentence], SentenceProperty]:
    """Make a sentence function the property of the outputs whose key starts with `key`."""
    return lambda says: SentenceProperty(key, says)


@dataclass(frozen=True)
class Invariant:
    """Outputs whose key starts with `key` satisfy `zero(output, inputs) ≈ 0` in every set (a
    row of residuals per set); `why` says, in the course's words, what a violation means."""

    key: str
    unit: str
    what: str  # the quantity that must vanish: "the sum of grad_x over the normalized dims"
    why: str
    zero: Grouping  # an output and the inputs -> one residual per set

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
        residual, reference = self.zero(got, inputs), self.zero(want, inputs)
        if residual is None or reference is None or not np.all(np.isfinite(residual)):
            return ""
        # about one set's norm: residuals far below it are 0 up to ε and rounding
        tolerance = 1e-3 * np.abs(want).max() * np.sqrt(want.size / residual.size)
        if np.any(np.abs(reference) > tolerance / 10):
            return ""  # the correct output does not satisfy it on these inputs
        off = np.abs(residual) > tolerance
        if not off.any():
            return ""
        return f"{self.what} is far from 0 in {_places(off, self.unit)}: {self.why}"


# An output's key and the check's inputs -> (what belongs there, in words; the known tensors a
# wrong one may combine, by name), or None where these inputs hold no such tensors.
Terms = Callable[[str, dict[str, np.ndarray]], "tuple[str, dict[str, np.ndarray]] | None"]


def combination(coefficients: np.ndarray, names: list[str]) -> str:
    """'x − F₁(x)', '2·h', '0' from least-squares coefficients."""
    parts = []
    for c, name in zip(coefficients, names, strict=True):
        if abs(c) < 1e-6:
            continue
        size = "" if abs(abs(c) - 1) < 1e-6 else f"{abs(c):.3g}·"
        parts.append(("− " if c < 0 else "+ ") + size + name)
    text = " ".join(parts) or "0"
    return text[2:] if text.startswith("+ ") else "−" + text[2:] if text.startswith("− ") else text


def fit(got: np.ndarray, terms: dict[str, np.ndarray]) -> np.ndarray | None:
    """The coefficients that make `got` a combination of `terms` exactly (up to rounding), by
    least squares; None when no combination of them is `got`."""
    design = np.stack([t.ravel() for t in terms.values()], 1).astype(np.float64)
    target = got.ravel().astype(np.float64)
    coefficients, *_ = np.linalg.lstsq(design, target, rcond=None)
    if np.linalg.norm(design @ coefficients - target) > 1e-6 * np.linalg.norm(target):
        return None
    return coefficients


@dataclass(frozen=True)
class Combination:
    """Where a correct output is a fixed combination of known tensors (x and the sublayers'
    outputs in a block with stand-in sublayers, the sums a gradient is made of), a wrong one is
    often another combination of them: said as the combination it is ("what norm1 receives is
    x − F₁(x), where x + F₁(x) belongs")."""

    key: str
    terms: Terms
    structural: bool = False  # a wrong combination is a wrong structure (`Structural`)

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
        found = self.terms(self.key, inputs)
        if found is None or got.shape != want.shape or np.allclose(got, want):
            return ""
        correct, terms = found
        coefficients = fit(got, terms)
        if coefficients is None:
            return ""  # no combination of these terms: nothing sure to say
        said = f"{key} is {combination(coefficients, list(terms))}, where {correct}"
        return Structural(said) if self.structural else said


def _spread(rows: np.ndarray, centered: bool) -> np.ndarray:
    return rows.var(1) if centered else (rows * rows).mean(1)


def _places(bad: np.ndarray, unit: str) -> str:
    """'every row', or 'rows 0–3, 7 (of 12)'."""
    if bad.all():
        return f"every {unit}"
    index = np.flatnonzero(bad)
    runs, start = [], index[0]
    for previous, current in zip(index, [*index[1:], None], strict=True):
        if current != previous + 1:
            runs.append(f"{start}" if start == previous else f"{start}–{previous}")
            start = current
    shown = ", ".join(runs[:4]) + (", …" if len(runs) > 4 else "")
    return f"{unit}{'s' if len(index) > 1 else ''} {shown} (of {bad.size})"


def _evenly_normalized(rows: np.ndarray, centered: bool, target: float | None = None) -> bool:
    """Every set has mean 0 (when centered) and nine sets in ten share one spread within 5 %:
    the mark of a normalization over these sets, whatever its estimator (sets whose spread is
    close to ε come out smaller); with `target`, that spread is `target` within 5 %."""
    if not np.all(np.isfinite(rows)) or rows.shape[1] < 2:
        return False
    spread = _spread(rows, centered)
    typical = float(np.median(spread))
    if typical <= 0 or (target is not None and abs(typical / target - 1) > 0.05):
        return False
    centered_ok = not centered or bool(np.all(np.abs(rows.mean(1)) < 0.02 * np.sqrt(typical)))
    return centered_ok and bool(np.mean(np.abs(spread / typical - 1) < 0.05) >= 0.9)


def _unbiased_hint(ratio: float, n: int) -> str:
    if n > 1 and abs(ratio - (n - 1) / n) < 0.01 * (1 / n):
        return f" — (n−1)/n for n = {n}: the variance divided by n−1 instead of n"
    if n > 1 and abs(ratio - n / (n - 1)) < 0.01 * (1 / n):
        return f" — n/(n−1) for n = {n}: the variance divided by n where n−1 belongs"
    return ""


def _first_normalized(
    options: list[tuple[str, Grouping]],
    got: np.ndarray,
    given: Arrays,
    centered: bool,
    target: float | None = None,
) -> str:
    """The words of the smallest sets among `options` that `got` is evenly normalized over
    (an output normalized per row is also normalized over any union of rows); '' if none."""
    found = []
    for words, grouping in options:
        rows = grouping(got, given)
        if rows is not None and _evenly_normalized(rows.astype(np.float64), centered, target):
            found.append((rows.shape[1], words))
    return min(found)[1] if found else ""


def _normalized_there(rows: np.ndarray, centered: bool, target: float) -> bool:
    """`rows` are evenly normalized to the spread `target`, or to the n−1 estimator's share of it
    (n values a set: an unbiased variance over other sets is still a normalization over them)."""
    rows, n = rows.astype(np.float64), rows.shape[1]
    shares = (1.0, (n - 1) / n) if n > 1 and centered else (1.0,)
    return any(_evenly_normalized(rows, centered, target * share) for share in shares)


def _normalized_instead(
    p: Normalized, got: np.ndarray, want: np.ndarray, given: Arrays, target: float
) -> str:
    """The words of the smallest of `p.instead`'s sets that `got` is evenly normalized over and
    that tell it from a correct output; '' if none. An output normalized over small sets is so
    over any union of them (per channel, it is per group too): where `got` is normalized over
    `p.sets`, only smaller sets over which a correct output is not normalized tell it apart."""
    rows = p.sets(got, given)
    right = rows is not None and _normalized_there(rows, p.centered, target)
    size = 0 if rows is None else rows.shape[1]
    found = []
    for words, grouping in p.instead:
        rows_got = grouping(got, given)
        if rows_got is None or not _normalized_there(rows_got, p.centered, target):
            continue
        if right:
            rows_want = grouping(want, given)
            if rows_got.shape[1] >= size or (
                rows_want is not None and _normalized_there(rows_want, p.centered, target)
            ):
                continue
        found.append((rows_got.shape[1], len(found), words))
    return min(found)[2] if found else ""  # of equal sets, the first listed


def _centered_instead(p: Normalized, got: np.ndarray, want: np.ndarray, given: Arrays) -> str:
    """The words of the smallest of `p.instead`'s sets over which `got` has mean 0 and a correct
    output does not (the mean was taken over those sets); '' if none."""
    found = []
    for words, grouping in p.instead:
        rows_got, rows_want = grouping(got, given), grouping(want, given)
        if rows_got is None or rows_want is None or rows_got.shape[1] < 2:
            continue
        rows_got, rows_want = rows_got.astype(np.float64), rows_want.astype(np.float64)
        scale = np.sqrt(rows_want.var(1)) + 1e-12
        if np.all(np.abs(rows_got.mean(1)) < 1e-3 * scale) and np.any(
            np.abs(rows_want.mean(1)) > 0.01 * scale
        ):
            found.append((rows_got.shape[1], len(found), words))
    return min(found)[2] if found else ""  # of equal sets, the first listed


def _sentence(p: Normalized, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    rows_got, rows_want = p.sets(got, inputs), p.sets(want, inputs)
    if rows_got is None or rows_want is None or rows_got.shape != rows_want.shape:
        return ""
    if not (np.all(np.isfinite(rows_got)) and np.all(np.isfinite(rows_want))):
        return ""
    rows_got, rows_want = rows_got.astype(np.float64), rows_want.astype(np.float64)
    want_spread = _spread(rows_want, p.centered)
    if np.any(want_spread <= 1e-12):
        return ""
    scale = np.sqrt(want_spread)
    if p.centered and not np.all(np.abs(rows_want.mean(1)) < 1e-3 * scale + 1e-6):
        return ""  # the correct output is not centered here (e.g. constant rows): nothing to say
    options = [(p.over, p.sets), *p.instead]
    target = float(np.median(want_spread))  # the spread of a normalization over any sets
    bare = {k: v for k, v in inputs.items() if k not in ("weight", "bias")}
    if len(bare) < len(inputs):  # an affine was given: is the output normalized without it?
        words = _first_normalized(options, got, bare, p.centered, target)
        if words:
            where = "" if words == p.over else f", not {p.over}"
            joint = ", and" if where else ", but"
            given = " and ".join(f"`{k}`" for k in ("weight", "bias") if k in inputs)
            verb = "are" if " and " in given else "is"
            said = f"{key} is normalized {words}{where}{joint} {given} {verb} not applied"
            return Structural(said) if where else said
    words = _normalized_instead(p, got, want, inputs, target)
    if words:
        return Structural(f"{key} is normalized {words}, not {p.over}")
    if p.centered:
        words = _centered_instead(p, got, want, inputs)
        if words:
            return Structural(
                f"{key} has mean 0 {words}, where a correct output's is not 0: its mean is "
                f"taken over those sets, not {p.over}"
            )
    mean = rows_got.mean(1)
    if p.centered:
        off = np.abs(mean) > 0.01 * scale + 1e-6
        if off.any():
            worst = mean[off][np.argmax(np.abs(mean[off]))]
            return (
                f"{key} has a mean of up to {worst:.2g} {p.over} in {_places(off, p.unit)}, not 0"
            )
    elif np.all(np.abs(mean) < 1e-3 * scale) and not np.all(
        np.abs(rows_want.mean(1)) < 1e-3 * scale
    ):
        return f"{key} has mean 0 {p.over}: this norm only rescales, it never subtracts the mean"
    ratio = _spread(rows_got, p.centered) / want_spread
    off = np.abs(ratio - 1) > 0.01
    if not off.any():
        return ""
    what = "variance" if p.centered else "mean square"
    typical = float(np.median(ratio[off]))
    hint = _unbiased_hint(typical, rows_got.shape[1]) if p.centered else ""
    return (
        f"the {what} of {key} {p.over} is {typical:.3g} times the correct one in "
        f"{_places(off, p.unit)}{hint}"
    )


def _affine_relation(key: str, got: np.ndarray, want: np.ndarray) -> str:
    """'`y` is 2 times the correct value' or 'is the correct value shifted by 0.1', when a
    scale or a shift of the whole output is all that is wrong; '' otherwise."""
    got, want = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    if got.size < 2 or not (np.all(np.isfinite(got)) and np.all(np.isfinite(want))):
        return ""
    norm = float(np.linalg.norm(want))
    if norm == 0:
        return ""
    scale = float(got @ want) / norm**2
    if np.linalg.norm(got - scale * want) < 1e-3 * norm and abs(scale - 1) > 1e-3:
        return f"{key} is {scale:.3g} times the correct value, everywhere"
    shift = float(np.mean(got - want))
    if np.linalg.norm(got - want - shift) < 1e-3 * norm and abs(shift) > 1e-6:
        return f"{key} is the correct value shifted by the same {shift:.2g} everywhere"
    if np.all(want != 0) and np.allclose(got * want, 1, rtol=1e-3):
        return f"{key} is 1 / the correct value: a division is upside down"
    return ""


def _row_factors(key: str, got: np.ndarray, want: np.ndarray) -> str:
    """'`grad_x` is the correct value times a factor that changes from row to row', when each
    row (over the last dim) is the correct one scaled; '' otherwise."""
    if got.ndim < 2 or not np.all(np.isfinite(got)):
        return ""
    rows_got = got.astype(np.float64).reshape(-1, got.shape[-1])
    rows_want = want.astype(np.float64).reshape(-1, want.shape[-1])
    norms = np.einsum("ij,ij->i", rows_want, rows_want)
    if np.any(norms == 0):
        return ""
    factors = np.einsum("ij,ij->i", rows_got, rows_want) / norms
    if np.linalg.norm(rows_got - factors[:, None] * rows_want) > 1e-3 * np.linalg.norm(rows_want):
        return ""
    return (
        f"{key} is the correct value times a factor that changes from row to row (from "
        f"{factors.min():.4g} to {factors.max():.4g}): a per-row factor, such as 1/σ, is missing "
        "or wrong"
    )


def _safe_sentence(p: Property, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """`p`'s sentence; '' when the student's output defeats its arithmetic (infinities, a fit
    that does not converge): a wrong answer never makes the grader fail."""
    with np.errstate(all="ignore"):
        try:
            return p.sentence(key, inputs, got, want)
        except (ValueError, ArithmeticError, TypeError, np.linalg.LinAlgError):
            return ""


def explain(properties: tuple[Property, ...], inputs: Arrays, got: Arrays, want: Arrays) -> str:
    """The first property of a correct output that `got` violates, in words; '' if none."""
    for key, expected in want.items():
        actual = got.get(key)
        if actual is None:
            continue
        named = key if " " in key else f"`{key}`"
        if actual.shape != expected.shape:
            sentence = shape_sentence(named, actual.shape, expected.shape, inputs)
            if sentence:
                return sentence
            continue
        for p in properties:
            if key.startswith(p.key):
                sentence = _safe_sentence(p, named, inputs, actual, expected)
                if sentence:
                    return sentence
        if expected.dtype == np.bool_ and expected.ndim == 0:
            return f"{named}: {_yes(actual)}, where the exercise asks for {_yes(expected)}"
        if np.issubdtype(expected.dtype, np.floating):
            sentence = (
                _not_finite(named, actual, expected)
                or _affine_relation(named, actual, expected)
                or _row_factors(named, actual, expected)
            )
            if sentence:
                return sentence
    return ""


def _yes(flag: np.ndarray) -> str:
    return "yes" if bool(flag) else "no"


def _dims(dims: tuple[int, ...]) -> str:
    return f"dim{'s' if len(dims) > 1 else ''} {', '.join(map(str, dims))}"


def _removed(full: tuple[int, ...], kept: tuple[int, ...]) -> tuple[int, ...] | None:
    """The dims of `full` whose removal leaves `kept` (the first such set); None if none."""
    drop = len(full) - len(kept)
    if drop <= 0:
        return None
    for dims in itertools.combinations(range(len(full)), drop):
        if tuple(s for i, s in enumerate(full) if i not in dims) == kept:
            return dims
    return None


_ARGUMENT = re.compile(r"[a-z]+(?:_[a-z]+)*")


def shape_sentence(key: str, got: tuple[int, ...], want: tuple[int, ...], inputs: Arrays) -> str:
    """What a wrong shape says about the computation: every dim reduced, the wrong dims reduced
    (read against the inputs' shapes), a statistic or a parameter where one value per element
    belongs, or extra dims from a view built too long; '' when the shape tells nothing."""
    if got == () and want != ():
        return f"{key} is a single number: it was reduced over every dim"
    if len(got) == len(want) and all(g in (w, 1) for g, w in zip(got, want, strict=True)):
        ones = tuple(i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
        return (
            f"{key} has size 1 along {_dims(ones)}: a statistic or a parameter took the place of "
            "one value per element"
        )
    for name, value in inputs.items():
        if not (_ARGUMENT.fullmatch(name) and np.issubdtype(value.dtype, np.floating)):
            continue  # only the exercise's own arguments, by the names its text uses
        if value.ndim < 1 or value.shape == want:
            continue
        if got == value.shape:
            return f"{key} has the shape of `{name}` alone: `{name}` was not combined with the rest"
        reduced, expected = _removed(value.shape, got), _removed(value.shape, want)
        if reduced is not None and expected is not None:
            return (
                f"{key} is `{name}` reduced over {_dims(reduced)}, where {_dims(expected)} "
                "should be reduced"
            )
    broadcast = _broadcast_argument(key, got, want, inputs)
    if broadcast:
        return broadcast
    if len(got) > len(want) and got[len(got) - len(want) :] == want:
        return (
            f"{key} has {len(got) - len(want)} extra leading dims: a view was given too many dims"
        )
    if len(got) > len(want) and got[: len(want)] != want:
        extra = len(got) - len(want)
        return f"{key} has {extra} dims more than expected: a view was given too many dims"
    if np.prod(got) == np.prod(want):
        return (
            f"{key} holds as many values as expected, in another shape: a view was not shaped back"
        )
    return ""


def _broadcast_argument(
    key: str, got: tuple[int, ...], want: tuple[int, ...], inputs: Arrays
) -> str:
    """'`weight` was broadcast against the wrong dims', when `got` is the correct output's shape
    broadcast against a 1-d argument viewed with another number of dims (γ of shape (C,) viewed
    as (1, C, 1, 1, 1, 1) against a 4-d output); '' otherwise."""
    if len(got) == len(want):
        return ""
    for name, value in inputs.items():
        if not (_ARGUMENT.fullmatch(name) and value.ndim == 1 and value.size > 1):
            continue
        for dim in range(len(got)):
            view = tuple(value.size if i == dim else 1 for i in range(len(got)))
            try:
                shaped = np.broadcast_shapes(want, view)
            except ValueError:
                continue
            if shaped == got:
                return (
                    f"`{name}` (shape {value.shape}) was broadcast against the wrong dims of "
                    f"{key}: viewed as {view}, it has {len(view)} dims where the output has "
                    f"{len(want)}, and broadcasting lines dims up from the last; view it with one "
                    "dim per dim of the output"
                )
    return ""


def _not_finite(key: str, got: np.ndarray, want: np.ndarray) -> str:
    """NaN or infinity where the correct output is finite: where, and the usual cause."""
    bad = ~np.isfinite(got) & np.isfinite(want)
    if not bad.any():
        return ""
    rows = bad.reshape(bad.shape[0], -1).any(1) if bad.ndim > 1 else bad
    return (
        f"{key} is NaN or infinite in {_places(rows, 'position')} along its first dim, where the "
        "correct output is finite: a square root of a negative number (a variance or mean "
        "square below 0) or a division by 0"
    )


def extent(key: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str:
    """Where and how much an output differs: the share of values, the rows along its first dim,
    and the largest difference in multiples of the tolerance."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    allowance = atol + rtol * np.abs(want)
    with np.errstate(invalid="ignore"):
        excess = np.abs(got - want) / allowance
    excess = np.where(np.isnan(got) & np.isnan(want), 0.0, np.nan_to_num(excess, nan=np.inf))
    bad = excess > 1
    where = f"at {int(bad.sum())} of {bad.size} values ({100 * bad.mean():.0f} %)"
    if bad.ndim > 1 and bad.shape[0] > 1:
        rows = bad.reshape(bad.shape[0], -1).any(1)
        where += f", in {_places(rows, 'position')} along its first dim"
    worst = float(excess.max()) if excess.size else 0.0
    return where if np.isinf(worst) else f"{where}, by up to {worst:.2g} times the tolerance"


# ---------------------------------------------------------------------------------------------
# The family table: how each kind of norm splits its output into sets sharing one statistic


def _without_affine(y: np.ndarray, a: Arrays, per_channel: bool) -> np.ndarray | None:
    """The output before `weight` and `bias` (elementwise over the trailing dims, or per channel
    of dim 1); None where a weight near 0 would blow up the division."""
    if "weight" not in a:
        return y
    view = (1, -1, *[1] * (y.ndim - 2)) if per_channel else a["weight"].shape
    weight = a["weight"].reshape(view)
    bias = a["bias"].reshape(view) if "bias" in a else 0.0
    if np.any(np.abs(weight) < 0.1):
        return None
    return (y - bias) / weight


def _trailing_count(a: Arrays) -> int:
    return 1 if a["normalized_shape"].ndim == 0 else a["normalized_shape"].size


def _rows_over(count: Callable[[np.ndarray, Arrays], int]) -> Grouping:
    def rows(y: np.ndarray, a: Arrays) -> np.ndarray | None:
        plain, k = _without_affine(y, a, per_channel=False), count(y, a)
        if plain is None or not 0 < k <= y.ndim:
            return None
        return plain.reshape(-1, int(np.prod(y.shape[-k:])))

    return rows


def _per_sample(y: np.ndarray, a: Arrays, per_channel: bool) -> np.ndarray | None:
    plain = _without_affine(y, a, per_channel)
    return None if plain is None or y.ndim < 2 else plain.reshape(y.shape[0], -1)


def _across_batch(y: np.ndarray, a: Arrays) -> np.ndarray | None:
    plain = _without_affine(y, a, per_channel=False)
    if plain is None or y.shape[0] < 2:
        return None
    return np.moveaxis(plain, 0, -1).reshape(-1, y.shape[0])


def trailing_norm(centered: bool) -> Normalized:
    """LayerNorm (centered) and RMSNorm: one set per sample and position, over the trailing
    `normalized_shape` dims."""
    last_only = _rows_over(lambda y, a: 1 if _trailing_count(a) > 1 else 0)
    return Normalized(
        key="y",
        unit="row",
        over="over the normalized_shape dims",
        sets=_rows_over(lambda y, a: _trailing_count(a)),
        instead=(
            ("over the last dim only", last_only),
            ("over the batch (dim 0) at each position", _across_batch),
            ("over every dim of each sample", lambda y, a: _per_sample(y, a, per_channel=False)),
        ),
        centered=centered,
    )


# Named, so that the student's check finds them by name (normcheck.expected).
LAYER_NORM_ROWS = trailing_norm(centered=True)
RMS_NORM_ROWS = trailing_norm(centered=False)


def _channels(y: np.ndarray, a: Arrays) -> np.ndarray | None:
    plain = _without_affine(y, a, per_channel=True)
    return None if plain is None else np.moveaxis(plain, 1, 0).reshape(y.shape[1], -1)


def _last_as_channels(y: np.ndarray, a: Arrays) -> np.ndarray | None:
    return None if y.ndim < 3 else np.moveaxis(y, -1, 0).reshape(y.shape[-1], -1)


BATCH_NORM_TRAINING = Normalized(
    key="output of training step",
    unit="channel",
    over="over the batch (every dim but dim 1) for each channel",
    sets=_channels,
    instead=(
        ("over each sample's features (LayerNorm's sets)", lambda y, a: _per_sample(y, a, True)),
        ("with the last dim taken as the channels", _last_as_channels),
    ),
)


def _groups(
    interleaved: bool = False, swapped: bool = False, per_position: bool = False
) -> Grouping:
    """GroupNorm's sets, or a wrong answer's: every G-th channel (`interleaved`), C/G groups of
    G channels (`swapped`, None where that is the same), a group's channels at each position
    apart (`per_position`)."""

    def groups(y: np.ndarray, a: Arrays) -> np.ndarray | None:
        plain, g = _without_affine(y, a, per_channel=True), int(a["num_groups"])
        if plain is None or g < 1 or y.ndim < 3 or y.shape[1] % g:
            return None
        n, c = y.shape[:2]
        if swapped:
            if c // g == g:
                return None
            g = c // g
        if interleaved:
            return plain.reshape(n, c // g, g, -1).swapaxes(1, 2).reshape(n * g, -1)
        if per_position:
            return np.moveaxis(plain.reshape(n, g, c // g, -1), 2, -1).reshape(-1, c // g)
        return plain.reshape(n * g, -1)

    return groups


GROUP_NORM_SETS = Normalized(
    key="y",
    unit="group",
    over="over each group of consecutive channels and every position",
    sets=_groups(),
    instead=(
        ("over every G-th channel (interleaved groups)", _groups(interleaved=True)),
        ("per channel (InstanceNorm's sets)", lambda y, a: _channels_per_sample(y, a)),
        ("over each whole sample (LayerNorm's sets)", lambda y, a: _per_sample(y, a, True)),
        (
            "over a group's channels at each position apart (the positions left out)",
            _groups(per_position=True),
        ),
        ("in C/G groups of G channels (G and C/G swapped)", _groups(swapped=True)),
    ),
)


def _channels_per_sample(y: np.ndarray, a: Arrays) -> np.ndarray | None:
    plain = _without_affine(y, a, per_channel=True)
    return None if plain is None else plain.reshape(y.shape[0] * y.shape[1], -1)


def normalized_rows(values: np.ndarray, a: Arrays) -> np.ndarray:
    """`values` as (rows, n): one row per set of the trailing `normalized_shape` dims."""
    return values.reshape(-1, int(np.prod(values.shape[-_trailing_count(a) :])))


def _first_training_batch(y: np.ndarray, a: Arrays, per_token: bool) -> np.ndarray | None:
    """The first step's real tokens, (tokens, features) before the affine, one set per feature
    (or per token); None if that step is an evaluation."""
    if not a["training"][0] or y.ndim != 2:
        return None
    real = _without_affine(y[: int(a["mask"][0].sum())], a, per_channel=False)
    return None if real is None else real if per_token else real.T


MASKED_BATCH_NORM = Normalized(
    key="output at real tokens",
    unit="feature",
    over="over the real tokens of a training batch, for each feature",
    sets=lambda y, a: _first_training_batch(y, a, per_token=False),
    instead=(
        (
            "over each token's features (LayerNorm's sets)",
            lambda y, a: _first_training_batch(y, a, per_token=True),
        ),
    ),
)


# ---------------------------------------------------------------------------------------------
# Running statistics: an exponential moving average of each batch's statistic

# The running statistic before a training step, this batch's statistic (per channel or feature)
# and the momentum; None when the inputs hold no such single step.
History = Callable[[dict[str, np.ndarray]], "tuple[np.ndarray, np.ndarray, float] | None"]


@dataclass(frozen=True)
class RunningAverage:
    """A running statistic after one training step is (1 − momentum)·old + momentum·s, s being
    the batch's `statistic`; `explain` fits got = a·old + b·s over the channels and says which
    weight is off (or that it is no such average at all)."""

    key: str
    statistic: str  # in words: "mean over the real tokens"
    history: History

    def _weights(self, value: np.ndarray, old: np.ndarray, s: np.ndarray):
        """(old's weight or None when old is 0, the batch's weight, whether the fit is exact)."""
        zero_old = not old.any()
        constant = np.ones_like(s) if np.ptp(old) == 0 else old
        design = np.stack([constant, s], 1)
        (a, b), *_ = np.linalg.lstsq(design, value, rcond=None)
        exact = np.linalg.norm(design @ [a, b] - value) <= 1e-4 * (np.abs(value).max() + 1)
        old_weight = None if zero_old else a / old[0] if constant is not old else a
        return old_weight, b, exact

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
        found = self.history(inputs)
        if found is None or got.ndim != 1 or len(got) < 3 or not np.all(np.isfinite(got)):
            return ""
        old, s, m = (np.asarray(v, np.float64) for v in found)
        if not self._weights(want.astype(np.float64), old, s)[2]:
            return ""  # the correct value is not such an average on these inputs: say nothing
        old_weight, b, exact = self._weights(got.astype(np.float64), old, s)
        b = 0.0 if abs(b) < 1e-9 else b  # rounding of an exact 0
        if not exact:
            return (
                f"{key} is no weighted average of its old value and this batch's "
                f"{self.statistic}: a running statistic moves by (1 − momentum)·old + "
                f"momentum·new"
            )
        # a module the check built without a momentum runs with the default it hands out
        momentum = "momentum" if "momentum" in inputs else "the default momentum"
        if abs(b - m) > 1e-3:
            swapped = abs(b - (1 - m)) < 1e-3
            hint = " (1 − momentum: the Keras convention)" if swapped else ""
            return (
                f"this batch's {self.statistic} enters {key} with weight {b:.3g}{hint}, not "
                f"{momentum} = {m:g}"
            )
        if old_weight is not None and abs(old_weight - (1 - m)) > 1e-3:
            return (
                f"the old value of {key} keeps weight {old_weight:.3g}, not 1 − {momentum} = "
                f"{1 - m:g}"
            )
        return ""


def _channel_stats(x: np.ndarray, channel_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and unbiased variance of `x` (float64)."""
    rows = np.moveaxis(x.astype(np.float64), channel_axis, 0).reshape(x.shape[channel_axis], -1)
    return rows.mean(1), rows.var(1, ddof=1) if rows.shape[1] > 1 else np.full(len(rows), np.nan)


def _batch_norm_first_step(which: int) -> History:
    def history(a: Arrays):
        batch = a.get("training batch 1")
        if batch is None:
            return None
        old = a["running_mean" if which == 0 else "running_var"]
        return old, _channel_stats(batch, 1)[which], _given(a, "momentum")

    return history


def _given(a: Arrays, name: str) -> float:
    """The value of the argument `name` the answer runs with: the one the check passes, or, for
    a module the check builds without it, the default its `__init__` is handed out with (the
    case's `default <name>`)."""
    return float(a[name] if name in a else a[f"default {name}"])


def _masked_single_step(which: int) -> History:
    def history(a: Arrays):
        if "running_mean" not in a or a["training"].tolist() != [True]:
            return None
        real = a["x"][0][a["mask"][0]]
        old = a["running_mean" if which == 0 else "running_var"]
        return old, _channel_stats(real, 1)[which], float(a["momentum"])

    return history


@sentence_for("output of the evaluation call")
def evaluated_on_the_batch(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """BatchNorm's evaluation output is normalized with the running statistics; one normalized
    per channel over the evaluation batch itself used that batch's statistics instead."""
    rows_got, rows_want = _channels(got, inputs), _channels(want, inputs)
    if rows_got is None or rows_want is None or rows_got.shape[1] < 2:
        return ""
    got_normalized = _evenly_normalized(rows_got.astype(np.float64), True, target=1.0)
    if not got_normalized or _evenly_normalized(rows_want.astype(np.float64), True, 1.0):
        return ""
    return (
        f"{key} is normalized with the evaluation batch's own statistics: with "
        "training=False, BatchNorm normalizes with `running_mean` and `running_var`"
    )


def _short(value: float) -> str:
    """1e-05 as '1e-5', 0.0001 as '1e-4', 0.5 as '0.5': a small constant as the course writes it."""
    if value == 0 or abs(value) >= 1e-2:
        return f"{value:.3g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


@sentence_for("output of the evaluation call")
def default_eps(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """A module the check built without an `eps`, given its running statistics, evaluates
    (x − running_mean) / √(running_var + ε) with the default ε its `__init__` is handed out with:
    that ε is read back from its output, value by value, where the running variance is close to
    it (the case's `default eps`)."""
    if "default eps" not in inputs or "eps" in inputs or got.shape != want.shape:
        return ""
    x = inputs["evaluation batch"].astype(np.float64)
    mean, var = (inputs[k].astype(np.float64) for k in ("running_mean", "running_var"))
    y = _without_affine(got.astype(np.float64), inputs, per_channel=True)
    if y is None or not np.all(np.isfinite(y)):
        return ""
    read = np.abs(y) > 0.1 * np.abs(y).max()  # away from 0, where the ratio is well defined
    eps = (((x - mean) / np.where(read, y, 1.0)) ** 2 - var)[read]
    default = float(inputs["default eps"])
    # one ε for every value (to rounding), else the output is wrong otherwise: say nothing
    if eps.size == 0 or np.ptp(eps) > 1e-3 * (var.max() + np.abs(eps).max()):
        return ""
    added = float(np.median(eps))
    if abs(added - default) <= 1e-2 * default:
        return ""
    return (
        f"built with its defaults, your module adds ε = {_short(added)} to the variance, not "
        f"the default eps = {_short(default)} its `__init__` is handed out with"
    )


@sentence_for("output at padding")
def zero_padding(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """A padded position carries no token: its output is 0, whatever the padding held."""
    if np.any(want != 0) or not np.all(np.isfinite(got)):
        return ""
    held = np.concatenate([x[~m] for x, m in zip(inputs["x"], inputs["mask"], strict=True)])
    passed = held.shape == got.shape and np.allclose(got, held, equal_nan=True)
    what = "the padding's own values, passed through" if passed else "not 0"
    return f"{key} is {what}: a padded position carries no token, so its output is 0"


BATCH_NORM_RUNNING = (
    RunningAverage("running_mean after training step 1", "mean", _batch_norm_first_step(0)),
    RunningAverage(
        "running_var after training step 1", "unbiased variance", _batch_norm_first_step(1)
    ),
)
MASKED_RUNNING = (
    RunningAverage("running_mean", "mean over the real tokens", _masked_single_step(0)),
    RunningAverage("running_var", "unbiased variance over the real tokens", _masked_single_step(1)),
)


# ---------------------------------------------------------------------------------------------
# A variance along one dim, and a momentum converted between conventions


@sentence_for("var")
def variance(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """`var` is the biased variance of `x` along `dim`: never negative, 0 for a constant row,
    the smallest mean square deviation from any centre (E(x − c)² = Var x + (μ − c)²)."""
    if got.shape != want.shape or not np.all(np.isfinite(got)):
        return ""
    got, want = got.astype(np.float64), want.astype(np.float64)
    n = inputs["x"].shape[int(inputs["dim"])]
    if np.any(got < 0):
        return f"{key} is negative in {_places(got < 0, 'position')}: a variance never is"
    vanished = (got == 0) & (want > 0)
    if vanished.any():
        return (
            f"{key} is 0 in {_places(vanished, 'position')} where the values vary: the "
            "squares cancelled (E[x²] − E[x]² loses every digit when the mean is large) and "
            "the result was cut off at 0"
        )
    if np.all(want == 0):
        return (
            f"{key} of constant values is {float(got.max()):.3g}, not 0: the deviations are "
            "not measured from the values' own mean"
        )
    ratio = float(np.median(got / want))
    if np.allclose(got, ratio * want, rtol=1e-3):
        hint = _unbiased_hint(ratio, n)
        if hint:
            return f"{key} is {ratio:.3g} times the biased variance{hint}"
    if _about_another_mean(got, inputs):
        return (
            f"{key} measures the deviations from the mean along another dim than `dim`: "
            "the mean and the squares must run along the same dim"
        )
    if np.all(got < want * (1 - 1e-3)):
        return (
            f"{key} is smaller than the variance everywhere: it is not the mean of the "
            "squared deviations (the square of their mean absolute value, for one, is less)"
        )
    if np.all(got > want * (1 + 1e-3)):
        return (
            f"{key} is larger than the variance everywhere: the squared deviations are not "
            "taken from the mean along `dim` (any other centre gives more)"
        )
    return ""


def _about_another_mean(got: np.ndarray, a: Arrays) -> bool:
    """`got` is the mean square along `dim` of the deviations from the mean along another dim."""
    x, dim = a["x"].astype(np.float64), int(a["dim"]) % a["x"].ndim
    for other in set(range(x.ndim)) - {dim}:
        deviations = x - x.mean(other, keepdims=True)
        if np.allclose(got, (deviations**2).mean(dim), rtol=1e-3, atol=1e-6):
            return True
    return False

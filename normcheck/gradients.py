"""What a wrong gradient of LayerNorm or BatchNorm gets wrong (`layer_norm_backward`,
`batch_norm_backward`), measured without the closed form the student is asked to derive.

x moves a normalization's output along three paths: directly (in x − μ), through the mean μ and
through the spread σ of the set of values it shares them with (a row over `normalized_shape`
for LayerNorm, a channel over N and L for BatchNorm: `Sets`). `gradient_paths` measures each
path's share of the gradient of Σ grad_out·norm(x) numerically, by central differences that
nudge x in one place of the forward and hold it in the others; the paths sum to the whole
gradient. A grad_x that is another combination of them is said by the term it misses or gets
wrong ("`grad_x` misses the term through the mean μ"). The invariances of the function (a set's
shift leaves the output alone, its rescaling almost) explain a grad_x the paths do not span, and
grad_weight and grad_bias are said as the combination of the sums they are made of, or, for a
grad_weight no such combination fits, as beyond the bound any Σ grad_out·x̂ keeps to
(Cauchy–Schwarz). BatchNorm's gradient has these paths in training only: in evaluation its
statistics are constants, and every property but the precision of finite differences is silent
there (`InTraining`). Only coefficients and which sets are off are reported, never an input or a
correct value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from normcheck.properties import (
    Combination,
    Invariant,
    Property,
    fit,
    normalized_rows,
    sentence_for,
)

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Sets:
    """How a normalization splits x into the sets of values that share one μ and one σ."""

    norm: str  # "LayerNorm"
    unit: str  # one set: "row"
    over: str  # the values of one set: "over the normalized dims"
    shared: str  # what γ and β are shared over: "every leading dim"
    to_rows: Callable[[np.ndarray, Arrays], np.ndarray]  # shaped like x -> (sets, values)
    from_rows: Callable[[np.ndarray, Arrays], np.ndarray]  # the inverse
    weight: Callable[[Arrays], np.ndarray]  # γ, broadcast against x
    shared_axis: int  # the axis of the rows along which one γ (and β) is shared

    def rows(self, values: np.ndarray, a: Arrays) -> np.ndarray:
        return self.to_rows(values.astype(np.float64), a)

    def centered_x(self, a: Arrays) -> np.ndarray:
        rows = self.rows(a["x"], a)
        return rows - rows.mean(1, keepdims=True)

    def upstream(self, a: Arrays) -> np.ndarray:
        """grad_out·γ as rows: what reaches x̂."""
        return self.rows(a["grad_out"] * self.weight(a) if "weight" in a else a["grad_out"], a)


def _channel_rows(values: np.ndarray, a: Arrays) -> np.ndarray:
    return np.moveaxis(values, 1, 0).reshape(values.shape[1], -1)


def _from_channel_rows(rows: np.ndarray, a: Arrays) -> np.ndarray:
    n, c, *rest = a["x"].shape
    return np.moveaxis(rows.reshape(c, n, *rest), 0, 1)


LAYER_NORM_SETS = Sets(
    norm="LayerNorm",
    unit="row",
    over="over the normalized dims",
    shared="every leading dim",
    to_rows=normalized_rows,
    from_rows=lambda rows, a: rows.reshape(a["x"].shape),
    weight=lambda a: a["weight"],
    shared_axis=0,
)
BATCH_NORM_SETS = Sets(
    norm="BatchNorm",
    unit="channel",
    over="over a channel's values",
    shared="N and L",
    to_rows=_channel_rows,
    from_rows=_from_channel_rows,
    weight=lambda a: a["weight"].reshape(1, -1, *[1] * (a["x"].ndim - 2)),
    shared_axis=1,
)


def _off_the_scale_path(sets: Sets) -> Callable[[np.ndarray, Arrays], np.ndarray]:
    def residual(g_x: np.ndarray, a: Arrays) -> np.ndarray:
        """Per set, how far grad_x's part that moves neither the set's mean nor its spread is
        from rstd·(the same part of grad_out·γ): along those directions the norm only scales by
        γ/σ."""
        x = sets.centered_x(a)
        rstd = 1 / np.sqrt((x * x).mean(1, keepdims=True) + float(a["eps"]))
        x_hat = x * rstd

        def off_mean_and_spread(v: np.ndarray) -> np.ndarray:
            v = v - v.mean(1, keepdims=True)
            along = (v * x_hat).sum(1, keepdims=True) / (x_hat * x_hat).sum(1, keepdims=True)
            return v - x_hat * along

        rows = off_mean_and_spread(sets.rows(g_x, a))
        through = rstd * off_mean_and_spread(sets.upstream(a))
        return np.linalg.norm(rows - through, axis=1)

    return residual


# ---------------------------------------------------------------------------------------------
# The three paths, measured numerically

PATHS = ("directly (μ and σ held)", "through the mean μ", "through the spread σ")


def _loss_rows(
    sets: Sets, a: Arrays, direct: np.ndarray, for_mean: np.ndarray, for_spread: np.ndarray
) -> np.ndarray:
    """Per set, Σ grad_out·γ·x̂ with x read as `direct` in x − μ, as `for_mean` in μ and as
    `for_spread` in σ (β only adds a constant, so it is left out)."""
    mean = for_mean.mean(1, keepdims=True)
    spread = np.sqrt(for_spread.var(1, keepdims=True) + float(a["eps"]))
    return (sets.upstream(a) * (direct - mean) / spread).sum(1)


def gradient_paths(sets: Sets, a: Arrays) -> dict[str, np.ndarray]:
    """The gradient of Σ grad_out·norm(x) with respect to x by central differences, one array
    per path of `PATHS` (x nudged in that place of the forward, held in the others); they sum to
    the whole gradient. Sets are independent, so one value is nudged in every set at once."""
    x = sets.rows(a["x"], a)
    step = 1e-5 * (x.std(1) + 1e-6)  # small against each set's spread, far above rounding
    paths = {}
    for place, name in enumerate(PATHS):
        grad = np.empty_like(x)
        for j in range(x.shape[1]):
            nudge = np.zeros_like(x)
            nudge[:, j] = step
            up = [x + nudge if k == place else x for k in range(3)]
            down = [x - nudge if k == place else x for k in range(3)]
            grad[:, j] = (_loss_rows(sets, a, *up) - _loss_rows(sets, a, *down)) / (2 * step)
        paths[name] = sets.from_rows(grad, a)
    return paths


def layer_norm_paths(a: Arrays) -> dict[str, np.ndarray]:
    return gradient_paths(LAYER_NORM_SETS, a)


@dataclass(frozen=True)
class GradientPaths:
    """grad_x is the sum of the three paths (`gradient_paths`); a wrong grad_x that is another
    combination of them is said by the terms it misses or takes the wrong number of times."""

    sets: Sets = LAYER_NORM_SETS
    key: str = "grad_x"

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
        if got.shape != want.shape:
            return ""
        coefficients = fit(got, gradient_paths(self.sets, inputs))
        if coefficients is None or np.allclose(coefficients, 1, atol=1e-3):
            return ""
        said = []
        missing = [p for p, c in zip(PATHS, coefficients, strict=True) if abs(c) < 1e-3]
        if missing:
            said.append(f"misses the term{'s' if len(missing) > 1 else ''} {' and '.join(missing)}")
        said += [
            f"takes the term {p} {c:.3g} times, not once"
            for p, c in zip(PATHS, coefficients, strict=True)
            if abs(c) >= 1e-3 and abs(c - 1) > 1e-3
        ]
        return (
            f"{key} {'; it '.join(said)}: x moves {self.sets.norm}'s output directly, through μ "
            "and through σ, and its gradient is the sum of the three terms (each measured here by "
            "finite differences)"
        )


def _normalized(sets: Sets, a: Arrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """grad_out, x̂ and x − μ as rows, one per set that shares μ and σ."""
    x = sets.centered_x(a)
    x_hat = x / np.sqrt((x * x).mean(1, keepdims=True) + float(a["eps"]))
    return sets.rows(a["grad_out"], a), x_hat, x


def _affine_terms(sets: Sets) -> Callable[[str, Arrays], tuple[str, dict] | None]:
    def terms(key: str, a: Arrays) -> tuple[str, dict[str, np.ndarray]] | None:
        """The sums over the shared dims that grad_weight and grad_bias are made of."""
        if "weight" not in a:
            return None
        g, x_hat, x = _normalized(sets, a)
        found = {
            "Σ grad_out·x̂": (g * x_hat).sum(sets.shared_axis),
            "Σ grad_out": g.sum(sets.shared_axis),
            "Σ x̂": x_hat.sum(sets.shared_axis),
            "Σ grad_out·(x − μ)": (g * x).sum(sets.shared_axis),
        }
        correct = "Σ grad_out·x̂" if key == "grad_weight" else "Σ grad_out"
        return f"{correct} belongs (sums over {sets.shared})", found

    return terms


@dataclass(frozen=True)
class WithinItsBound:
    """grad_weight is Σ grad_out·x̂ over the shared dims, so each of its values is at most
    ‖grad_out‖·‖x̂‖ over them in size (Cauchy–Schwarz), whatever the inputs: a value beyond that
    bound is no sum of grad_out weighted by x̂ (a division by x̂, a missing normalization), where
    `Combination` can only fit the sums it knows."""

    sets: Sets
    key: str = "grad_weight"

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
        if "weight" not in inputs or got.size != want.size:
            return ""
        g, x_hat, _ = _normalized(self.sets, inputs)
        axis = self.sets.shared_axis
        bound = np.sqrt((g * g).sum(axis) * (x_hat * x_hat).sum(axis))
        ratio = np.abs(got.astype(np.float64).ravel()) / (bound + 1e-12)
        over = ratio > 1.01
        if not np.all(np.isfinite(ratio)) or not over.any():
            return ""
        return (
            f"{key} is larger, in {over.sum()} of its {over.size} values (up to {ratio.max():.3g} "
            f"times), than any Σ grad_out·x̂ can be (at most ‖grad_out‖·‖x̂‖ over "
            f"{self.sets.shared}): each of its values weighs grad_out by x̂, never divides by it"
        )


@sentence_for("grad")
def finite_differences(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """A gradient derived and computed in float64 agrees with the reference to a few roundings;
    one close to it but not that close is what finite differences (or float32) give."""
    if got.shape != want.shape or not np.all(np.isfinite(got)):
        return ""
    scale = float(np.abs(want).max()) or 1.0
    off = float(np.abs(got.astype(np.float64) - want).max()) / scale
    if not 1e-13 < off < 1e-4:
        return ""
    return (
        f"{key} agrees with the gradient only as closely as finite differences or float32 "
        "arithmetic do, not to float64's last digits as a formula derived by hand does: the "
        "exercise asks for the closed form, computed in the input's dtype"
    )


def backward_properties(sets: Sets) -> tuple[Property, ...]:
    """What a correct grad_x, grad_weight and grad_bias of the normalization satisfy."""
    return (
        finite_differences,
        GradientPaths(sets),
        Combination("grad_weight", _affine_terms(sets)),
        WithinItsBound(sets),
        Combination("grad_bias", _affine_terms(sets)),
        Invariant(
            key="grad_x",
            unit=sets.unit,
            what=f"the sum of grad_x {sets.over}",
            why=f"shifting a {sets.unit} of x does not move {sets.norm}'s output, so its gradient "
            "has no component along that shift; the term from μ depending on x (−⟨g⟩) is missing "
            "or wrong",
            zero=lambda g, a: sets.rows(g, a).sum(1),
        ),
        Invariant(
            key="grad_x",
            unit=sets.unit,
            what=f"the sum of grad_x·(x − μ) {sets.over}",
            why=f"rescaling a {sets.unit} of x leaves {sets.norm}'s output (almost) unchanged, so "
            "its gradient is orthogonal to x − μ; the term from σ depending on x (−x̂⟨g·x̂⟩) is "
            "missing or wrong",
            zero=lambda g, a: (sets.rows(g, a) * sets.centered_x(a)).sum(1),
        ),
        Invariant(
            key="grad_x",
            unit=sets.unit,
            what=f"the part of grad_x that moves neither a {sets.unit}'s mean nor its spread, "
            "less grad_out·γ/σ there,",
            why=f"along those directions {sets.norm} only scales by γ/σ; the weight γ or the "
            "factor 1/σ is missing or wrong in that term",
            zero=_off_the_scale_path(sets),
        ),
    )


@dataclass(frozen=True)
class InTraining:
    """A property of BatchNorm's gradient through its batch statistics, silent on a check in
    evaluation mode: there the statistics are the running ones, constants, so no path runs
    through them and the invariances of a batch-normalized output do not hold."""

    inner: Property

    @property
    def key(self) -> str:
        return self.inner.key

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
        if not bool(inputs.get("training", True)):
            return ""
        return self.inner.sentence(key, inputs, got, want)


LAYER_NORM_BACKWARD = backward_properties(LAYER_NORM_SETS)
BATCH_NORM_BACKWARD = (
    finite_differences,  # in either mode
    *(InTraining(p) for p in backward_properties(BATCH_NORM_SETS) if p is not finite_differences),
)

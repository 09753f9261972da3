"""What a wrong gradient of LayerNorm gets wrong (`layer_norm_backward`), measured without the
closed form the student is asked to derive.

x moves LayerNorm's output along three paths: directly (in x − μ), through the mean μ and
through the spread σ. `layer_norm_paths` measures each path's share of the gradient of
Σ grad_out·LN(x) numerically, by central differences that nudge x in one place of the forward
and hold it in the others; the paths sum to the whole gradient. A grad_x that is another
combination of them is said by the term it misses or gets wrong ("`grad_x` misses the term
through the mean μ"). The invariances of the function (a row's shift leaves the output alone,
its rescaling almost) explain a grad_x the paths do not span, and grad_weight and grad_bias are
said as the combination of the sums they are made of. Only coefficients and which rows are off
are reported, never an input or a correct value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.checks.properties import Combination, Invariant, fit, normalized_rows

Arrays = dict[str, np.ndarray]


def _centered_x(a: Arrays) -> np.ndarray:
    rows = normalized_rows(a["x"].astype(np.float64), a)
    return rows - rows.mean(1, keepdims=True)


def _off_the_scale_path(g_x: np.ndarray, a: Arrays) -> np.ndarray:
    """Per row, how far grad_x's part that moves neither the row's mean nor its spread is from
    rstd·(the same part of grad_out·γ): along those directions LayerNorm only scales by γ/σ."""
    x = _centered_x(a)
    rstd = 1 / np.sqrt((x * x).mean(1, keepdims=True) + float(a["eps"]))
    x_hat = x * rstd
    g = a["grad_out"] * a["weight"] if "weight" in a else a["grad_out"]

    def off_mean_and_spread(v: np.ndarray) -> np.ndarray:
        v = v - v.mean(1, keepdims=True)
        return v - x_hat * (v * x_hat).sum(1, keepdims=True) / (x_hat * x_hat).sum(1, keepdims=True)

    rows = off_mean_and_spread(normalized_rows(g_x.astype(np.float64), a))
    through = rstd * off_mean_and_spread(normalized_rows(g.astype(np.float64), a))
    return np.linalg.norm(rows - through, axis=1)


# ---------------------------------------------------------------------------------------------
# The three paths, measured numerically

PATHS = ("directly (μ and σ held)", "through the mean μ", "through the spread σ")


def _upstream(a: Arrays) -> np.ndarray:
    """grad_out·γ as rows: what reaches x̂ (γ broadcast over the leading dims)."""
    g = a["grad_out"] * a["weight"] if "weight" in a else a["grad_out"]
    return normalized_rows(g.astype(np.float64), a)


def _loss_rows(a: Arrays, direct: np.ndarray, for_mean: np.ndarray, for_spread: np.ndarray):
    """Per row, Σ grad_out·γ·x̂ with x read as `direct` in x − μ, as `for_mean` in μ and as
    `for_spread` in σ (β only adds a constant, so it is left out)."""
    mean = for_mean.mean(1, keepdims=True)
    spread = np.sqrt(for_spread.var(1, keepdims=True) + float(a["eps"]))
    return (_upstream(a) * (direct - mean) / spread).sum(1)


def layer_norm_paths(a: Arrays) -> dict[str, np.ndarray]:
    """The gradient of Σ grad_out·LN(x) with respect to x by central differences, one array per
    path of `PATHS` (x nudged in that place of the forward, held in the others); they sum to the
    whole gradient. Rows are independent, so one feature is nudged in every row at once."""
    x = normalized_rows(a["x"].astype(np.float64), a)
    step = 1e-5 * (x.std(1) + 1e-6)  # small against each row's spread, far above rounding
    paths = {}
    for place, name in enumerate(PATHS):
        grad = np.empty_like(x)
        for j in range(x.shape[1]):
            nudge = np.zeros_like(x)
            nudge[:, j] = step
            up = [x + nudge if k == place else x for k in range(3)]
            down = [x - nudge if k == place else x for k in range(3)]
            grad[:, j] = (_loss_rows(a, *up) - _loss_rows(a, *down)) / (2 * step)
        paths[name] = grad.reshape(a["x"].shape)
    return paths


@dataclass(frozen=True)
class GradientPaths:
    """grad_x is the sum of the three paths (`layer_norm_paths`); a wrong grad_x that is another
    combination of them is said by the terms it misses or takes the wrong number of times."""

    key: str = "grad_x"

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
        if got.shape != want.shape:
            return ""
        coefficients = fit(got, layer_norm_paths(inputs))
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
            f"{key} {'; it '.join(said)}: x moves LayerNorm's output directly, through μ and "
            "through σ, and its gradient is the sum of the three terms (each measured here by "
            "finite differences)"
        )


def _affine_terms(key: str, a: Arrays) -> tuple[str, dict[str, np.ndarray]] | None:
    """The sums over the leading dims that grad_weight and grad_bias are made of."""
    if "weight" not in a:
        return None
    x = normalized_rows(a["x"].astype(np.float64), a)
    x_hat = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + float(a["eps"]))
    g = normalized_rows(a["grad_out"].astype(np.float64), a)
    centred = x - x.mean(1, keepdims=True)
    terms = {
        "Σ grad_out·x̂": (g * x_hat).sum(0),
        "Σ grad_out": g.sum(0),
        "Σ x̂": x_hat.sum(0),
        "Σ grad_out·(x − μ)": (g * centred).sum(0),
    }
    correct = "Σ grad_out·x̂" if key == "grad_weight" else "Σ grad_out"
    return f"{correct} belongs (sums over every leading dim)", terms


LAYER_NORM_BACKWARD = (
    GradientPaths(),
    Combination("grad_weight", _affine_terms),
    Combination("grad_bias", _affine_terms),
    Invariant(
        key="grad_x",
        unit="row",
        what="the sum of grad_x over the normalized dims",
        why="shifting a row of x does not move LayerNorm's output, so its gradient has no "
        "component along that shift; the term from μ depending on x (−⟨g⟩) is missing or wrong",
        zero=lambda g, a: normalized_rows(g.astype(np.float64), a).sum(1),
    ),
    Invariant(
        key="grad_x",
        unit="row",
        what="the sum of grad_x·(x − μ) over the normalized dims",
        why="rescaling a row of x leaves LayerNorm's output (almost) unchanged, so its gradient "
        "is orthogonal to x − μ; the term from σ depending on x (−x̂⟨g·x̂⟩) is missing or wrong",
        zero=lambda g, a: (normalized_rows(g.astype(np.float64), a) * _centered_x(a)).sum(1),
    ),
    Invariant(
        key="grad_x",
        unit="row",
        what="the part of grad_x that moves neither a row's mean nor its spread, less "
        "grad_out·γ/σ there,",
        why="along those directions LayerNorm only scales by γ/σ; the weight γ or the factor "
        "1/σ is missing or wrong in that term",
        zero=_off_the_scale_path,
    ),
)

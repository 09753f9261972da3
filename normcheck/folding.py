"""What a wrong folded bias is made of (`fold_batch_norm`, notebook 02's properties).

A folded bias is a combination of the layer's bias b, the running mean, the scale
s = γ/√(running_var + ε) and β; a wrong one is said as the combination it is, against the one
the feedback says belongs. Like every property these read only a check's inputs and outputs, so
the student's own `check()` runs them too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normcheck.properties import Combination, Terms, fit
from normcheck.shared import Arrays


def _scale(a: Arrays, eps: bool = True) -> np.ndarray:
    """s = γ/√(running_var + ε) in float64 (γ = 1 without affine); without ε if not `eps`."""
    var = a["running_var"].astype(np.float64)
    return a.get("gamma", np.float64(1.0)) / np.sqrt(var + float(a["eps"]) if eps else var)


# What a folded bias may be made of: the layer's bias b and running_mean, each times the scale
# (correct), unscaled, divided by it or times the scale without ε, then β or the scale itself.
# Few terms per family: a check has 4 to 6 output channels, and a fit of as many terms as
# values would fit anything.
_BIAS_FAMILIES = {
    "s·b": lambda a, s: s,
    "b": lambda a, s: np.ones_like(s),
    "b/s": lambda a, s: 1 / s,
    "s₀·b": lambda a, s: _scale(a, eps=False),
}
_CORRECT_BIAS = "s·b − s·running_mean + β belongs, with s = γ/√(running_var + ε)"


def _bias_terms(family: str):
    """The folded bias's terms of one family of `_BIAS_FAMILIES`, for `Combination`."""
    factor = _BIAS_FAMILIES[family]

    def terms(key: str, a: Arrays) -> tuple[str, dict[str, np.ndarray]]:
        f = factor(a, _scale(a))
        on_mean = family.replace("b", "running_mean")
        found = {family: f * a["bias"]} if "bias" in a else {}
        found[on_mean] = f * a["running_mean"]
        if family == "s·b":  # the scale itself, where a product lost its other factor
            found["s"] = _scale(a)
        if "beta" in a:
            found["β"] = a["beta"].astype(np.float64)
        return _CORRECT_BIAS + (" (s₀ = γ/√running_var)" if "s₀" in family else ""), found

    return terms


@dataclass(frozen=True)
class _Float32Combination:
    """A `Combination` fitted to a float32 output, whose coefficients carry float32 rounding
    (1.0000008): said with the coefficients rounded to 4 decimals, as "β", not "1·β"."""

    key: str
    terms: Terms

    def sentence(self, key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
        _, terms = self.terms(key, inputs)
        coefficients = fit(got, terms) if got.shape == want.shape else None
        if coefficients is None:
            return ""
        rounded = sum(c * t for c, t in zip(coefficients.round(4), terms.values(), strict=True))
        return Combination(self.key, self.terms).sentence(key, inputs, rounded, want)


FOLD_PROPERTIES = tuple(_Float32Combination("folded bias", _bias_terms(f)) for f in _BIAS_FAMILIES)

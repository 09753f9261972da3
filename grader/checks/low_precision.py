"""Checks for notebook 06's `rms_norm_upcast`: RMSNorm over the last dim of a float16 or
bfloat16 input, computed in float32 and returned in the input's dtype (LLaMA's recipe).

float16 rows with activations in the hundreds make a mean square computed in float16 overflow
(x² > 65504 is inf, and the row becomes x/inf = 0); a float16 zero row with ε = 1e-12 makes an ε
rounded to float16 (where it is 0) give 0/0 = NaN. Outputs are compared at the output dtype's
rounding: a correct answer's float32 result, rounded once, is within an ulp of the reference's.

Rubric (4): the formula on float32 rows 0.5 (where the default ε = 1e-6 matters), and with
an explicit ε 0.5; float16 rows in the hundreds 1.5 (its visible twin 0.5); bfloat16 rows 0.5;
a float16 zero row with ε = 1e-12 0.5; the result in the input's dtype 0.5. Computing in the
input's dtype keeps 2 (float32, bfloat16, the dtype); an ε rounded to it 3.5, ignored 3; a
result not cast back 3.5.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from grader.checks.core import Arrays, Exercise, hidden, known_mistake, visible
from grader.checks.inputs import randn
from grader.checks.library import NORMALIZATIONS, forbid
from grader.checks.variants import IGNORED_EPS, eps_ignored
from grader.grading.sandboxed.probes import LOW_PRECISION, probe_rms_norm_upcast

# Three roundings of float16 (11 significant bits): the reference's and the answer's float32
# results rounded once, and the weight's product. bfloat16 has float32's range, so only digits
# are at stake there, and its check asks for bfloat16 handled, not for digits: five roundings
# (8 significant bits), which a mean square computed in bfloat16 itself stays well within.
FLOAT16 = {"rtol": 3 * 2.0**-10, "atol": 1e-4}
BFLOAT16 = {"rtol": 5 * 2.0**-7, "atol": 1e-3}


def _upcast_variant(
    x,
    weight=None,
    eps=1e-6,
    *,
    in_input_dtype=False,
    eps_in_input_dtype=False,
    cast_back=True,
    fixed_eps=None,
):
    """RMSNorm upcast, with a switch per classic slip; the defaults are correct."""
    eps = eps if fixed_eps is None else fixed_eps
    h = x if in_input_dtype else x.float()
    if eps_in_input_dtype:
        eps = torch.tensor(eps, dtype=x.dtype).item()  # 1e-12 is 0 in float16
    y = h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps)
    if cast_back:
        y = y.to(x.dtype)
    return y if weight is None else y * weight


def _in(dtype: str | None, values: np.ndarray) -> np.ndarray:
    """`values` rounded to `dtype` and kept as float32: a low-precision input travels as float32
    with its dtype's name as a flag (NumPy has no bfloat16), so that another CPU's few ulps of
    float32 never move a value across its dtype's rounding."""
    values = torch.from_numpy(values.astype(np.float32))
    return (values.to(LOW_PRECISION[dtype]) if dtype else values).float().numpy()


def _rows(rng, *shape, scale: float, dtype=None, weight=True, **flags) -> Arrays:
    """Rows of `scale`-sized activations in `dtype` (None: float32), with a weight near 1."""
    case = {"x": _in(dtype, randn(rng, *shape) * np.float32(scale))}
    if weight:
        case["weight"] = _in(dtype, rng.uniform(0.5, 1.5, shape[-1]))
    return (
        case
        | {k: np.array(v) for k, v in flags.items()}
        | ({dtype: np.array(True)} if dtype else {})
    )


def _zero_row(rng) -> Arrays:
    """Rows in the hundreds and a row of zeros (a padded position), with ε = 1e-12: the zeros
    tell an ε rounded to float16 (0/0), the hundreds a mean square computed in float16."""
    x = randn(rng, 3, 64) * np.float32(300)
    x[1] = 0
    return {"x": _in("float16", x), "eps": np.array(1e-12), "float16": np.array(True)}


_slip = partial(known_mistake, _upcast_variant)

RMS_NORM_UPCAST = Exercise(
    name="rms_norm_upcast",
    reference=_upcast_variant,  # every switch off
    probe=probe_rms_norm_upcast,
    forbidden=forbid(*NORMALIZATIONS),
    mistakes=(
        _slip(
            "computed in the input's dtype",
            "Your mean square is computed in the input's own dtype: in float16 an activation "
            "above 256 squares to inf, and the whole row becomes x/inf = 0. The statistics "
            "need float32.",
            in_input_dtype=True,
        ),
        _slip(
            "eps rounded to the input's dtype",
            "Your ε is rounded to the input's dtype, where 1e-12 is 0: a row of zeros then "
            "gives 0/0 = NaN. ε belongs in the float32 computation.",
            eps_in_input_dtype=True,
        ),
        _slip(
            "result not cast back",
            "Your result does not come back in the input's dtype (float16 in, float16 out), "
            "the dtype the next layer expects.",
            cast_back=False,
        ),
        _slip("eps argument ignored", eps_ignored("RMSNorm"), fixed_eps=IGNORED_EPS),
    ),
    checks=(
        visible(
            0.5,
            "float32 rows of mean square near 1e-6 with a weight, the default eps",
            lambda rng: _rows(rng, 4, 16, scale=1e-3),
        ),
        hidden(
            0.5,
            "float32 rows of mean square near 1e-4, an explicit eps=1e-4",
            lambda rng: _rows(rng, 3, 16, scale=1e-2, eps=1e-4),
            twin=0.25,
        ),
        hidden(
            1.5,
            "float16 rows with activations in the hundreds, with a weight",
            lambda rng: _rows(rng, 4, 64, scale=300.0, dtype="float16"),
            twin=0.5,
            **FLOAT16,
        ),
        hidden(
            0.5,
            "bfloat16 rows with activations in the hundreds, with a weight",
            lambda rng: _rows(rng, 4, 64, scale=300.0, dtype="bfloat16"),
            **BFLOAT16,
        ),
        hidden(
            0.5,
            "float16 rows with a row of zeros and eps=1e-12: zeros there, not NaN",
            _zero_row,
            twin=0.25,
            **FLOAT16,
        ),
        visible(
            0.5,
            "the result comes back in the input's dtype (float16 in, float16 out)",
            lambda rng: _rows(rng, 2, 8, scale=1.0, dtype="float16", weight=False, dtype_only=True),
        ),
    ),
)

EXERCISES = (RMS_NORM_UPCAST,)

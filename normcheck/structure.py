"""A Transformer block's residual structure, read off its outputs (notebook 04's properties).

The checks of `PostLNBlock`, `PreLNBlock`, `DeepNormBlock` and `PreLNEncoder`
(grader/checks/placement.py) replace the sublayers by known stand-ins F₁, F₂ and record what each
norm receives; with them, what a norm receives (or the block outputs) is a fixed combination of x
and the sublayers' outputs, and a wrong one is said as the combination it is ("what norm2
receives is x + F₁(x), where h + F₂(h) belongs"). Like every property, these read only the
check's inputs and outputs: they hold no reference block and no known mistake, so the student's
own `check()` runs them too.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from normcheck.properties import Combination, Structural, combination, sentence_for
from normcheck.shared import ALONE, Arrays

SWITCH_OFF = ("self_attn.out_proj.weight", "linear2.weight")  # zeroed: F₁ ≡ b₁, F₂ ≡ b₂


def _layer_norm(z: np.ndarray, a: Arrays, which: str) -> np.ndarray:
    """What the block's norm `which` gives for `z`: torch's own LayerNorm with its weights (this
    package holds no implementation of an exercise)."""
    weight, bias = (torch.from_numpy(a[f"w:{which}.{p}"]) for p in ("weight", "bias"))
    y = F.layer_norm(torch.from_numpy(z), z.shape[-1:], weight, bias, eps=1e-5)  # nn's default ε
    return y.numpy()


def _rms_norm(z: np.ndarray, a: Arrays, which: str) -> np.ndarray:
    """What the block's RMSNorm `which` gives for `z` (notebook 06's blocks: ε = 1e-6)."""
    weight = torch.from_numpy(a[f"w:{which}.weight"])
    return F.rms_norm(torch.from_numpy(z), z.shape[-1:], weight, eps=1e-6).numpy()


def _stand_ins(a: Arrays, norm=_layer_norm):
    f1 = lambda z: np.tanh(z @ a["f1_weight"]) + a["f1_bias"]  # noqa: E731
    f2 = lambda z: z @ a["f2_weight"]  # noqa: E731
    ln1 = lambda z: norm(z, a, "norm1")  # noqa: E731
    ln2 = lambda z: norm(z, a, "norm2")  # noqa: E731
    return f1, f2, ln1, ln2


def _post_ln_terms(key: str, a: Arrays) -> tuple[str, dict[str, np.ndarray]] | None:
    """(what belongs there, in words; the terms a wrong one may combine) for `key`; None
    without stand-in sublayers, where the block's own sublayers are no known tensors."""
    return _residual_scaled_terms(key, a, 1.0)


def _deepnorm_terms(key: str, a: Arrays) -> tuple[str, dict[str, np.ndarray]] | None:
    """As `_post_ln_terms`, the residual up-weighted by DeepNorm's α = (2N)^¼ (`a["dims"]`
    ends with N)."""
    return _residual_scaled_terms(key, a, (2 * int(a["dims"][-1])) ** 0.25)


def _residual_scaled_terms(
    key: str, a: Arrays, alpha: float
) -> tuple[str, dict[str, np.ndarray]] | None:
    """The terms of a Post-LN block whose residual is scaled by `alpha` (1: plain Post-LN)."""
    if "f1_weight" not in a:
        return None
    f1, f2, ln1, ln2 = _stand_ins(a)
    x = a["x"]
    s, of_alpha = ("", "") if alpha == 1 else ("α·", f"; α = (2N)^¼ = {alpha:.4g}")
    h = ln1(alpha * x + f1(x))
    with_h = f"with h = LN₁({s}x + F₁(x)){of_alpha}"
    if key == "what norm1 receives":
        return f"{s}x + F₁(x) belongs{of_alpha}", {"x": x, "F₁(x)": f1(x)}
    if key == "what norm2 receives":
        terms = {"h": h, "F₂(h)": f2(h), "x": x, "F₂(x)": f2(x)}
        return f"{s}h + F₂(h) belongs, {with_h}", terms
    return f"LN₂({s}h + F₂(h)) belongs, {with_h}", {
        f"LN₂({s}h + F₂(h))": ln2(alpha * h + f2(h)),
        "h": h,
    }


def _pre_ln_terms(key: str, a: Arrays) -> tuple[str, dict[str, np.ndarray]] | None:
    return _pre_norm_terms(key, a, _layer_norm, "LN")


def _pre_rms_norm_terms(key: str, a: Arrays) -> tuple[str, dict[str, np.ndarray]] | None:
    """As `_pre_ln_terms`, each norm an RMSNorm (notebook 06's `PreRMSNormBlock`)."""
    return _pre_norm_terms(key, a, _rms_norm, "RMS")


def _pre_norm_terms(key: str, a: Arrays, norm, n: str) -> tuple[str, dict[str, np.ndarray]] | None:
    """The terms of a Pre-norm block whose norms compute `norm`, said `n` ("LN", "RMS")."""
    if "f1_weight" not in a:
        return None
    f1, f2, norm1, norm2 = _stand_ins(a, norm)
    x = a["x"]
    u = x + f1(norm1(x))
    if key == "what norm1 receives":
        return "x belongs", {"x": x, "F₁(x)": f1(x)}
    if key == "what norm2 receives":
        terms = {"x": x, f"F₁({n}₁(x))": f1(norm1(x)), f"{n}₁(x)": norm1(x)}
        return f"u = x + F₁({n}₁(x)) belongs", terms
    terms = {"u": u, f"F₂({n}₂(u))": f2(norm2(u)), f"{n}₂(u)": norm2(u)}
    return f"u + F₂({n}₂(u)) belongs, with u = x + F₁({n}₁(x))", terms


def _stack_terms(key: str, a: Arrays) -> tuple[str, dict[str, np.ndarray]]:
    """A stack's output against the input and its final norm of the input: the blocks skipped."""
    x = a["x"]
    return "LN_f of the last block's output belongs", {"LN_f(x)": _layer_norm(x, a, "norm"), "x": x}


def _biases_added(a: Arrays) -> np.ndarray | None:
    """B, what a Pre-LN stack's blocks add to x when their output weights are zeroed (each
    sublayer then outputs its bias); None when these inputs do not zero them."""
    blocks = range(int(a["dims"][0]))
    if any(np.any(a[f"w:layers.{i}.{k}"]) for i in blocks for k in SWITCH_OFF):
        return None
    return sum(
        a[f"w:layers.{i}.self_attn.out_proj.bias"] + a[f"w:layers.{i}.linear2.bias"] for i in blocks
    )


@sentence_for("output")
def final_norm_reads(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """With every block's output weights zeroed, the blocks of a Pre-LN stack turn x into
    x + B, which its final LayerNorm normalizes. LN_f's affine undone, each output row is the
    row it read, centred and divided by its own spread, so fitting k_row·z_row = a·x_row + B
    (centred) says what LN_f read up to its scale, whatever the answer computed around it:
    "x + blocks(x)" for a stack that adds its input back around its blocks."""
    added, weight = _biases_added(inputs), inputs["w:norm.weight"]
    if added is None or np.abs(weight).min() < 1e-3 or got.shape != want.shape:
        return ""
    z = ((got - inputs["w:norm.bias"]) / weight).reshape(-1, len(weight))
    x = inputs["x"].reshape(z.shape)
    x, added = x - x.mean(-1, keepdims=True), added - added.mean()
    rows, n = z.shape
    design = np.zeros((rows * n, rows + 1))
    for r in range(rows):  # k_r · z_r − a · x_r = B, one equation per feature
        design[r * n : (r + 1) * n, r] = z[r]
        design[r * n : (r + 1) * n, rows] = -x[r]
    target = np.tile(added, rows)
    solution, *_ = np.linalg.lstsq(design, target, rcond=None)
    if np.linalg.norm(design @ solution - target) > 1e-6 * np.linalg.norm(target):
        return ""  # LN_f read no combination of x and B: nothing sure to say
    read = combination(np.array([solution[-1] - 1, 1.0]), ["x", "blocks(x)"])
    if read == "blocks(x)":
        return ""
    return Structural(
        f"with every block's output weights zeroed, what the final LayerNorm reads is {read} "
        "(up to its scale), where blocks(x), the last block's output, belongs"
    )


@sentence_for("how many times norm1 and norm2 are called")
def call_counts(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """Each norm of a block is called exactly once per forward."""
    if np.array_equal(got, want):
        return ""
    said = {1: "once", 2: "twice"}
    counts = [said.get(int(n), f"{int(n)} times") for n in got]
    return Structural(
        f"`norm1` is called {counts[0]} and `norm2` {counts[1]} per forward; each sublayer "
        "has its own norm, called once"
    )


@sentence_for(ALONE)
def batch_independence(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """Samples never meet in a block or a stack: the first sample's output is the same alone as
    in its batch (the probe returns the change, 0 for any answer that keeps samples apart)."""
    return Structural(
        "the first sample's output changes when the rest of the batch is removed: samples "
        "are mixed across the batch (the input is (B, T, D), batch first; attention runs "
        "over T within each sample)"
    )


def _block_properties(terms) -> tuple:
    keys = ("what norm1 receives", "what norm2 receives", "output")
    residuals = (Combination(k, terms, structural=True) for k in keys)
    return (call_counts, *residuals, batch_independence)


POST_LN_PROPERTIES = _block_properties(_post_ln_terms)
# A misplaced α is no wrong structure: DeepNorm's initialization, checked apart, keeps its points.
DEEPNORM_PROPERTIES = (
    call_counts,
    *(
        Combination(k, _deepnorm_terms)
        for k in ("what norm1 receives", "what norm2 receives", "output")
    ),
    batch_independence,
)
PRE_LN_PROPERTIES = _block_properties(_pre_ln_terms)
ENCODER_PROPERTIES = (
    batch_independence,
    Combination("output", _stack_terms, structural=True),
    final_norm_reads,
)


# --- notebook 06's PreRMSNormBlock: its attention, read off the weights it gives


@sentence_for("how much q_norm and k_norm normalize")
def qk_norm_inputs(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """In `_sa_block`, `q_norm` normalizes the queries and `k_norm` the keys, each as many values
    as the queries hold (in one call for all heads, or one a head); the values are not
    normalized."""
    if np.array_equal(got, want):
        return ""
    q, k = (f"{n:g}" for n in got)
    return (
        f"in `_sa_block`, `q_norm` normalizes {q} and `k_norm` {k} times as many values as the "
        "queries hold; each should normalize one projection, `q_norm` the queries and `k_norm` "
        "the keys (the values are not normalized)"
    )


@sentence_for("attention weights")
def attention_rows(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """Each query's attention weights are a distribution over the keys: the last dim sums to 1."""
    if got.shape != want.shape or np.allclose(got.sum(-1), 1, atol=1e-6):
        return ""
    over = " (they sum to 1 over the queries, dim -2)" if np.allclose(got.sum(-2), 1) else ""
    sums = got.sum(-1)
    return (
        f"each query's attention weights should sum to 1 over the keys (the last dim); yours "
        f"sum to between {sums.min():.3g} and {sums.max():.3g}{over}"
    )


@sentence_for("how much the attention weights move")
def attention_kept(key: str, inputs: Arrays, got: np.ndarray, want: np.ndarray) -> str:
    """With QK-norm the logits do not depend on the size of the query and key weights: the
    attention weights move by a rounding error when those grow. A move of order one says that
    the queries or keys reach the dot product with their size: not normalized per head."""
    moved = float(np.abs(got).max())
    if not np.isfinite(moved) or moved < 1e-3:
        return ""
    return (
        f"your attention weights move by up to {moved:.2g} when the query and key weights "
        f"grow ×{float(inputs['grown']):g}, where QK-norm keeps them (a move below 1e-5): "
        "queries and keys reach the dot product with their size, not normalized"
    )


QK_NORM_BLOCK_PROPERTIES = (
    *_block_properties(_pre_rms_norm_terms),
    qk_norm_inputs,
    attention_rows,
    attention_kept,
)

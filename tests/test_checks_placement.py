"""Notebook 04's checks: PostLNBlock, PreLNBlock, PreLNEncoder (what is specific to them;
full marks for the solutions and named mistakes for every seed are tested in test_checks.py).

A mistake is never blamed on another one; the course's own blocks agree with the PyTorch
references under the very probes that grade the students; the stand-in-sublayer checks judge
the placement alone; the inputs hold what the check descriptions promise; library blocks and
stacks earn zero even where the source is invisible (a class defined in a notebook); the
untouched release fails in plain words.
"""

from __future__ import annotations

import inspect
import linecache
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SEEDS, answer_from, solution_answers
from deepnorm_oracle import DeepNormBlock, deepnorm_constants
from torch import nn
from torch.nn import functional as F

from grader.checks import run
from grader.checks.core import StudentError, outputs_of, plan
from grader.checks.placement import EXERCISES, SWITCH_OFF, DeepNormVariant, encoder_constants
from grader.course import notebook_path
from grader.course.config import RELEASE
from grader.course.intake import answer_source, read_notebook, setup_code, source_notebook
from grader.grading.sandboxed import probes
from grader.grading.sandboxed.calling import call, load_answer
from grader.reference import blocks as reference
from normcheck import source_of

ASSIGNMENT = "04_placement"
BY_NAME = {e.name: e for e in EXERCISES}
CASES = [(e, m) for e in EXERCISES for m in e.mistakes]


SOLUTIONS = {name: solution_answers()[name] for name in BY_NAME}


# ---------------------------------------------------------------------------------------------
# Diagnoses


@pytest.mark.parametrize(("exercise", "mistake"), CASES, ids=lambda c: getattr(c, "name", ""))
def test_only_the_mistakes_own_message_appears(exercise, mistake):
    """A wrong placement must not be blamed on another one: only its own message shows."""
    verdict = run(exercise, mistake.impl, hidden=True, seed=5, source="")
    assert [m.name for m in verdict.diagnoses] == [mistake.name], verdict.render()


def test_the_right_placement_with_a_wrong_sublayer_keeps_the_structure_points():
    """The stand-in checks replace the sublayers, so they judge the placement alone."""
    source = SOLUTIONS["PostLNBlock"][1]
    assert "F.relu(self.linear1(x))" in source
    gelu = answer_from(
        source.replace("F.relu(self.linear1(x))", "F.gelu(self.linear1(x))"), "PostLNBlock"
    )
    verdict = run(BY_NAME["PostLNBlock"], gelu, hidden=True, seed=0, source="")
    for outcome in verdict.outcomes:
        if "known functions" in outcome.check.description:
            assert outcome.passed, verdict.render()
        if "equal nn.TransformerEncoderLayer" in outcome.check.description:
            assert not outcome.passed
    assert 0 < verdict.score < BY_NAME["PostLNBlock"].points


@pytest.mark.parametrize("name", ["PostLNBlock", "PreLNBlock"])
def test_a_block_that_mixes_samples_keeps_only_the_structures_cap(name):
    """Attention over the batch instead of the sequence (batch_first left False) passes the
    stand-in checks, whose sublayers keep samples apart; those points presuppose a block that
    does too, so the block keeps the cap, less than a wrong activation keeps."""
    source = SOLUTIONS[name][1]
    mixing = source.replace("batch_first=True", "batch_first=False")
    gelu = source.replace("F.relu(self.linear1(x))", "F.gelu(self.linear1(x))")
    assert mixing != source != gelu
    exercise = BY_NAME[name]
    for seed in SEEDS:
        mixed, slipped = (
            run(exercise, answer_from(s, name), hidden=True, seed=seed, source=s)
            for s in (mixing, gelu)
        )
        assert any(o.passed for o in mixed.outcomes), "the stand-in checks still pass"
        assert mixed.score == exercise.structure.cap < slipped.score, mixed.render()
        assert "samples are mixed across the batch" in mixed.render()
        assert "not built as the exercise asks" in mixed.render()


# ---------------------------------------------------------------------------------------------
# The references: PyTorch's layers, the reference blocks, and what the inputs promise


@pytest.mark.parametrize(
    ("name", "course_impl"),
    [("PostLNBlock", reference.PostLNBlock), ("PreLNBlock", reference.PreLNBlock)],
)
def test_reference_blocks_agree_with_the_torch_reference_under_every_probe(name, course_impl):
    exercise = BY_NAME[name]
    for seed in SEEDS:
        for _, inputs in plan(exercise, hidden=True, seed=seed):
            ours = outputs_of(exercise, course_impl, inputs)
            want = outputs_of(exercise, exercise.reference, inputs)
            assert ours.keys() == want.keys()
            for key in want:
                np.testing.assert_allclose(ours[key], want[key], rtol=1e-9, atol=1e-10)


def test_the_encoder_reference_equals_nn_transformer_encoder_with_a_final_norm(monkeypatch):
    """norm_utils' Encoder("pre", final_norm=True), the reference: PyTorch's stack, norm=LN."""
    exercise = BY_NAME["PreLNEncoder"]

    def torch_stack(num_layers, d_model, n_heads, d_ff):
        layer = nn.TransformerEncoderLayer(
            d_model, n_heads, d_ff, dropout=0.0, batch_first=True, norm_first=True
        )
        norm = nn.LayerNorm(d_model)
        return nn.TransformerEncoder(layer, num_layers, norm=norm, enable_nested_tensor=False)

    monkeypatch.setattr(probes, "TRUSTED", probes.TRUSTED | {torch_stack})
    for _, inputs in plan(exercise, hidden=True, seed=3):
        got, want = (
            outputs_of(exercise, torch_stack, inputs),
            outputs_of(exercise, exercise.reference, inputs),
        )
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_only_the_zeroed_checks_zero_weights_and_only_the_output_weights(seed):
    for exercise in EXERCISES:
        for check_, inputs in plan(exercise, hidden=True, seed=seed):
            weights = [k for k in inputs if k.startswith("w:")]
            zeroed = {k for k in weights if not inputs[k].any()}
            output_weights = {k for k in weights if k.endswith(SWITCH_OFF)}
            assert zeroed == (output_weights if "zeroed" in check_.description else set())


def test_a_pre_ln_block_with_zeroed_output_weights_is_a_pure_shift():
    """What the hidden switched-off check promises: y = x + b₁ + b₂ and ∂L/∂x = the cotangent."""
    exercise = BY_NAME["PreLNBlock"]
    _, inputs = next(
        (c, i) for c, i in plan(exercise, hidden=True, seed=11) if "zeroed" in c.description
    )
    out = outputs_of(exercise, exercise.reference, inputs)
    shift = inputs["w:self_attn.out_proj.bias"] + inputs["w:linear2.bias"]
    np.testing.assert_allclose(out["output"], inputs["x"] + shift, atol=1e-12)
    np.testing.assert_allclose(
        out["gradient with respect to the input"], inputs["cotangent"], atol=1e-12
    )


def _deepnorm_cases(seed: int, init: bool):
    exercise = BY_NAME["DeepNormBlock"]
    return [(c, i) for c, i in plan(exercise, hidden=True, seed=seed) if ("init seed" in i) == init]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_deepnorm_reference_is_the_oracles_block_under_every_probe(seed, monkeypatch):
    """The reference (the variant, every switch off) computes the oracle's block: the same
    outputs given the same weights, and initial gains within the init checks' tolerance."""
    exercise = BY_NAME["DeepNormBlock"]
    monkeypatch.setattr(probes, "TRUSTED", probes.TRUSTED | {DeepNormBlock})
    assert encoder_constants(7) == deepnorm_constants(7)
    for check_, inputs in plan(exercise, hidden=True, seed=seed):
        ours = outputs_of(exercise, DeepNormVariant, inputs)
        library = outputs_of(exercise, DeepNormBlock, inputs)
        assert ours.keys() == library.keys()
        tolerance = {"rtol": check_.rtol, "atol": check_.atol}
        if "init seed" not in inputs:
            tolerance = {"rtol": 1e-9, "atol": 1e-10}
        for key in ours:
            np.testing.assert_allclose(ours[key], library[key], **tolerance)


def _xavier_uniform_deepnorm(d_model, n_heads, d_ff, num_layers):
    """A correct answer that draws its init another way: Xavier-uniform (the same std as
    Xavier-normal's), the weights in another order, after torch's default init."""
    block = DeepNormVariant(d_model, n_heads, d_ff, num_layers, init=False)
    beta = (8 * num_layers) ** -0.25
    w_q, w_k, w_v = block.self_attn.in_proj_weight.chunk(3)
    for w in (block.linear2.weight, block.linear1.weight, block.self_attn.out_proj.weight, w_v):
        nn.init.xavier_uniform_(w, gain=beta)
    for w in (w_k, w_q):
        nn.init.xavier_uniform_(w)
    return block


@pytest.mark.slow  # 40 seeds × six width-512 blocks: the full run only
def test_a_correct_init_drawn_another_way_passes_the_init_checks_for_every_seed(monkeypatch):
    """The init checks compare two random draws (the answer's, the reference's): any correct
    init passes them, whatever its law and order, for every grading seed."""
    exercise = BY_NAME["DeepNormBlock"]
    monkeypatch.setattr(probes, "TRUSTED", probes.TRUSTED | {_xavier_uniform_deepnorm})
    for seed in range(40):
        verdict = run(exercise, _xavier_uniform_deepnorm, hidden=True, seed=seed, source="")
        init = [o for o in verdict.outcomes if "init" in o.check.description]
        assert len(init) == 6 and all(o.passed for o in init), verdict.render()


WRONG_ANSWERS = Path(__file__).resolve().parent / "wrong_answers"


@pytest.mark.parametrize(
    ("answer", "lost"),
    [
        ("beta_on_every_weight", 1),
        ("beta_on_the_ffn_only", 1),
        ("beta_forgotten", 2),
        ("no_init", 3),
    ],
)
def test_an_init_slip_loses_the_points_of_the_weights_it_gets_wrong(answer, lost):
    """The init checks go by pairs of weights with one role (w_q and w_k; w_v and out_proj;
    linear1 and linear2), 1 point each: β on one pair too many or too few costs 1 of 6, β
    forgotten everywhere 2, PyTorch's default init (every pair wrong) 3."""
    source = (WRONG_ANSWERS / f"DeepNormBlock__{answer}.answer").read_text()
    block = answer_from(source, "DeepNormBlock")
    verdict = run(BY_NAME["DeepNormBlock"], block, hidden=True, seed=1, source=source)
    assert verdict.max_score - verdict.score == lost, verdict.render()


def _layer_norm(weights: dict, which: str, z: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(z, z.shape[-1:], weights[f"{which}.weight"], weights[f"{which}.bias"])


def test_a_deepnorm_block_with_zeroed_output_weights_is_what_its_check_promises():
    """LN₂(α·LN₁(α·x + b₁) + b₂), α = (2N)^¼, for the depth N the case draws."""
    exercise = BY_NAME["DeepNormBlock"]
    for check_, inputs in _deepnorm_cases(seed=4, init=False):
        if "zeroed" not in check_.description:
            continue
        alpha = (2 * int(inputs["dims"][-1])) ** 0.25
        w = {k[2:]: torch.from_numpy(v) for k, v in inputs.items() if k.startswith("w:")}
        ln1, ln2 = (partial(_layer_norm, w, which) for which in ("norm1", "norm2"))
        x = torch.from_numpy(inputs["x"])
        h = ln1(alpha * x + w["self_attn.out_proj.bias"])
        want = ln2(alpha * h + w["linear2.bias"])
        out = outputs_of(exercise, exercise.reference, inputs)
        np.testing.assert_allclose(out["output"], want.numpy(), rtol=1e-10, atol=1e-12)


def test_the_init_checks_separate_every_beta_mistake_by_far_more_than_their_tolerance():
    """Each wrong β moves some gain by ≥ 9 % (the decoder's β against the encoder's, the
    closest), the tolerance 5 %, a correct draw's sampling error 0.6 % (one std)."""
    exercise = BY_NAME["DeepNormBlock"]
    for check_, inputs in _deepnorm_cases(seed=2, init=True):
        want = outputs_of(exercise, exercise.reference, inputs)
        for mistake in exercise.mistakes:
            got = outputs_of(exercise, mistake.impl, inputs)
            gap = max(abs(float(got[k]) / float(want[k]) - 1) for k in want)
            assert gap == 0 or gap > 1.8 * check_.rtol, (mistake.name, gap)


def test_stand_in_outputs_reveal_what_each_norm_reads():
    exercise = BY_NAME["PreLNBlock"]
    _, inputs = next(
        (c, i)
        for c, i in plan(exercise, hidden=False, seed=0)
        if "known functions" in c.description
    )
    out = outputs_of(exercise, exercise.reference, inputs)
    np.testing.assert_array_equal(out["what norm1 receives"], inputs["x"])  # Pre-LN: LN₁ reads x
    np.testing.assert_array_equal(out["how many times norm1 and norm2 are called"], [1, 1])


# ---------------------------------------------------------------------------------------------
# Library shortcuts and the untouched release

CHEATS = {
    "PostLNBlock": [
        "class PostLNBlock(nn.TransformerEncoderLayer):\n"
        "    def __init__(self, d, h, f):\n"
        "        super().__init__(d, h, f, dropout=0.0, batch_first=True)",
        "def PostLNBlock(d, h, f):\n"
        "    return nn.TransformerEncoderLayer(d, h, f, dropout=0.0, batch_first=True)",
        "from grader.reference.blocks import PostLNBlock as Reference\n"
        "class PostLNBlock(Reference):\n    pass",
        "from grader.reference.blocks import PostLNBlock",
    ],
    "PreLNBlock": [
        "class PreLNBlock(nn.TransformerEncoderLayer):\n"
        "    def __init__(self, d, h, f):\n"
        "        super().__init__(d, h, f, dropout=0.0, batch_first=True, norm_first=True)",
        "from grader.reference.blocks import _Block\n"
        "class PreLNBlock(_Block):\n"
        "    def forward(self, x):\n"
        "        x = x + self._sa_block(self.norm1(x), None, None)\n"
        "        return x + self._ff_block(self.norm2(x))",
    ],
    "PreLNEncoder": [
        "def PreLNEncoder(n, d, h, f):\n    return nu.Encoder('pre', n, d, h, f, final_norm=True)",
        "class PreLNEncoder(nn.TransformerEncoder):\n"
        "    def __init__(self, n, d, h, f):\n"
        "        layer = nn.TransformerEncoderLayer(d, h, f, 0.0, batch_first=True, "
        "norm_first=True)\n"
        "        super().__init__(layer, n, norm=nn.LayerNorm(d), enable_nested_tensor=False)",
    ],
}


@pytest.mark.parametrize("with_source", [True, False], ids=["source", "no source"])
@pytest.mark.parametrize(
    ("name", "source"), [(n, s) for n, ss in CHEATS.items() for s in ss], ids=lambda v: v[:40]
)
def test_library_blocks_earn_zero_even_when_the_source_is_invisible(name, source, with_source):
    """In a notebook `inspect.getsource` fails for classes, so `check`/`grade` scan nothing:
    the probe itself must refuse library blocks and stacks."""
    answer = answer_from(source, name)
    verdict = run(BY_NAME[name], answer, hidden=True, seed=0, source=source if with_source else "")
    assert verdict.score == 0, verdict.render()


def notebook_class(cell: str, name: str, filename: str) -> type:
    """A class defined as IPython defines it: the cell's text in linecache, `__main__` module."""
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    namespace = {"__name__": "__main__", "nn": nn, "F": nn.functional}
    exec(compile(cell, filename, "exec"), namespace)
    return namespace[name]


def test_check_in_the_kernel_scans_a_notebook_class_through_its_cell():
    """`inspect.getsource` fails for a class defined in a notebook; `source_of` reads the cell
    its methods came from, so the kernel's `check` sees a hidden call as the autograder does."""
    cell = SOLUTIONS["PostLNBlock"][1].replace(
        "    def forward(self, x", '    shortcut = eval("None")\n\n    def forward(self, x', 1
    )
    assert "eval" in cell
    block = notebook_class(cell, "PostLNBlock", "/tmp/ipykernel_0/4001.py")
    with pytest.raises((OSError, TypeError)):
        inspect.getsource(block)
    assert source_of(block) == cell
    verdict = run(BY_NAME["PostLNBlock"], block, hidden=True, seed=0, source=source_of(block))
    assert verdict.score == 0 and "eval" in verdict.render()
    honest = notebook_class(SOLUTIONS["PostLNBlock"][1], "PostLNBlock", "/tmp/ipykernel_0/4002.py")
    verdict = run(BY_NAME["PostLNBlock"], honest, hidden=True, seed=0, source=source_of(honest))
    assert verdict.score == BY_NAME["PostLNBlock"].points, verdict.render()


def test_a_student_stack_of_library_blocks_is_allowed():
    """The encoder exercise is about the stack: its blocks may be torch's Pre-LN layer (as the
    exercise says) or a Pre-LN block the cell writes itself."""
    solution = SOLUTIONS["PreLNEncoder"][1]
    library_layer = (
        "nn.TransformerEncoderLayer(\n"
        "                d_model, n_heads, d_ff, dropout=0.0, batch_first=True, norm_first=True\n"
        "            )"
    )
    assert library_layer in solution
    own_block = SOLUTIONS["PreLNBlock"][1].replace("class PreLNBlock(", "class Block(")
    for source in (
        solution,
        own_block + "\n" + solution.replace(library_layer, "Block(d_model, n_heads, d_ff)"),
    ):
        verdict = run(
            BY_NAME["PreLNEncoder"],
            answer_from(source, "PreLNEncoder"),
            hidden=True,
            seed=0,
            source=source,
        )
        assert verdict.score == BY_NAME["PreLNEncoder"].points, verdict.render()


def test_the_untouched_release_fails_every_check_in_plain_words():
    notebook = read_notebook(notebook_path(RELEASE, ASSIGNMENT))
    setup = setup_code(source_notebook(ASSIGNMENT))
    for exercise in EXERCISES:
        stub = load_answer(setup, answer_source(notebook, exercise.name), exercise.name)
        outputs, _ = call(exercise, stub, plan(exercise, hidden=False, seed=0)[0][1])
        assert isinstance(outputs, StudentError) and outputs.kind == "NotImplementedError"
        verdict = run(exercise, stub, hidden=True, seed=0, source="")
        assert verdict.score == 0 and "not implemented yet" in verdict.render()

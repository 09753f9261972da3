"""Notebook 06's checks of `PreRMSNormBlock` (what is specific to them; full marks for the
solution and named mistakes for every seed are tested in test_checks.py).

A mistake is never blamed on another one; the reference agrees with a block built on torch's own
attention under the very probes that grade the students; a correct attention written another
way (a loop over the heads) earns full marks; the stand-in-sublayer checks judge the placement
alone; the grown-weights check separates QK-norm from its absence by far more than its
tolerance; torch's attention earns nothing, even where the source is invisible; the untouched
release fails in plain words.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import SEEDS, solution_answers
from torch.nn import functional as F

from grader.checks import run
from grader.checks.core import StudentError, outputs_of, plan
from grader.checks.qk_norm import EXERCISES, KEPT
from grader.course import notebook_path
from grader.course.config import RELEASE
from grader.course.intake import answer_source, read_notebook, setup_code, source_notebook
from grader.grading.sandboxed.calling import call, load_answer
from grader.grading.sandboxed.probes import QK_GROWN
from grader.reference.modern import PreRMSNormBlock

ASSIGNMENT = "06_norm_family"
(EXERCISE,) = EXERCISES
NAME = EXERCISE.name
SOLUTION = solution_answers()[NAME][1]
SOFTMAX = "return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim), dim=-1)"


def answer(source: str):
    """An answer cell loaded as the autograder loads it: the notebook's imports cell, then it."""
    return load_answer(setup_code(source_notebook(ASSIGNMENT)), source, NAME)


def graded(source: str, seed: int = 0, with_source: bool = True):
    return run(EXERCISE, answer(source), hidden=True, seed=seed, source=source * with_source)


def edited(old: str, new: str) -> str:
    assert old in SOLUTION
    return SOLUTION.replace(old, new)


# ---------------------------------------------------------------------------------------------
# Diagnoses


@pytest.mark.parametrize("mistake", EXERCISE.mistakes, ids=lambda m: m.name)
def test_only_the_mistakes_own_message_appears(mistake):
    verdict = run(EXERCISE, mistake.impl, hidden=True, seed=5, source="")
    assert [m.name for m in verdict.diagnoses] == [mistake.name], verdict.render()


def test_queries_and_keys_normalized_head_by_head_earn_full_marks():
    """What the sublayer check counts is the values each norm normalizes, not its calls: one
    call a head is as right as one call for all heads."""
    per_head = edited(
        "q = self.q_norm(self._heads(self.q_proj(x)))\n"
        "        k = self.k_norm(self._heads(self.k_proj(x)))",
        "q, k = self._heads(self.q_proj(x)), self._heads(self.k_proj(x))\n"
        "        q = torch.stack([self.q_norm(q[:, h]) for h in range(self.n_heads)], 1)\n"
        "        k = torch.stack([self.k_norm(k[:, h]) for h in range(self.n_heads)], 1)",
    )
    for seed in SEEDS:
        verdict = graded(per_head, seed)
        assert verdict.score == EXERCISE.points and not verdict.diagnoses, verdict.render()


def test_values_normalized_by_q_norm_are_said_in_multiples_of_the_queries():
    """No known mistake normalizes the values with `q_norm`: the count of what each norm
    normalizes says it."""
    source = edited(
        "values = self._heads(self.v_proj(x))", "values = self.q_norm(self._heads(self.v_proj(x)))"
    )
    verdict = graded(source)
    assert verdict.score < EXERCISE.points
    assert "`q_norm` normalizes 2 and `k_norm` 1 times as many values" in verdict.render()


def test_the_stand_in_checks_judge_the_placement_alone():
    """A wrong attention keeps the residual structure's points; a wrong placement loses them."""
    no_scale = graded(edited(SOFTMAX, SOFTMAX.replace(" / math.sqrt(self.head_dim)", "")))
    post_norm = graded(
        edited("x = x + self._sa_block(self.norm1(x))", "x = self.norm1(x + self._sa_block(x))")
    )
    for verdict, structure_right in ((no_scale, True), (post_norm, False)):
        structure = [o for o in verdict.outcomes if "known functions" in o.check.description]
        assert len(structure) == 2
        assert all(o.passed == structure_right for o in structure), verdict.render()


# ---------------------------------------------------------------------------------------------
# The reference, and what the inputs promise


class TorchAttention(PreRMSNormBlock):
    """The reference's constructor with torch's own attention: F.scaled_dot_product_attention
    on the normalized heads (the identity for values gives the attention weights)."""

    def _normalized_heads(self, x):
        return self.q_norm(self._heads(self.q_proj(x))), self.k_norm(self._heads(self.k_proj(x)))

    def attention(self, x):
        q, k = self._normalized_heads(x)
        identity = torch.eye(x.shape[1], dtype=x.dtype).expand(*q.shape[:-1], -1)
        return F.scaled_dot_product_attention(q, k, identity)

    def _sa_block(self, x):
        q, k = self._normalized_heads(x)
        heads = F.scaled_dot_product_attention(q, k, self._heads(self.v_proj(x)))
        return self.out_proj(self._merge(heads))


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reference_agrees_with_torchs_attention_under_every_probe(seed):
    for _, inputs in plan(EXERCISE, hidden=True, seed=seed):
        ours = outputs_of(EXERCISE, PreRMSNormBlock, inputs)
        torchs = outputs_of(EXERCISE, TorchAttention, inputs)
        assert ours.keys() == torchs.keys()
        for key in ours:
            np.testing.assert_allclose(ours[key], torchs[key], rtol=1e-9, atol=1e-10)


def test_the_logit_bound_of_the_notebook_holds_for_the_checks_weights():
    """Notebook 06's Cauchy–Schwarz bound: a QK-normed logit is at most √head_dim times the
    largest |γ_q| and |γ_k|, whatever the query and key weights."""
    checks = [i for c, i in plan(EXERCISE, hidden=True, seed=3) if "grown" in i]
    for inputs in checks:
        block = PreRMSNormBlock(*(int(v) for v in inputs["dims"])).double()
        block.load_state_dict(
            {k[2:]: torch.from_numpy(v) for k, v in inputs.items() if k.startswith("w:")}
        )
        x = torch.from_numpy(inputs["x"]) * 1e3
        with torch.no_grad():
            q = block.q_norm(block._heads(block.q_proj(x)))
            k = block.k_norm(block._heads(block.k_proj(x)))
            logits = q @ k.transpose(-2, -1) / math.sqrt(block.head_dim)
        bound = math.sqrt(block.head_dim) * block.q_norm.weight.abs().max()
        assert logits.abs().max() <= bound * block.k_norm.weight.abs().max()


@pytest.mark.parametrize("seed", SEEDS)
def test_growing_weights_move_qk_norms_attention_far_below_the_tolerance_and_plain_by_far_more(
    seed,
):
    """What KEPT promises: with QK-norm the weights move by ε's rounding, without it by order
    one, the tolerance between them by orders of magnitude."""
    no_qk_norm = next(m for m in EXERCISE.mistakes if m.name == "no QK-norm")
    grown = [i for _, i in plan(EXERCISE, hidden=True, seed=seed) if "grown" in i]
    assert len(grown) == 2  # the hidden check and its visible twin
    for inputs in grown:
        kept = np.abs(outputs_of(EXERCISE, PreRMSNormBlock, inputs)[QK_GROWN]).max()
        moved = np.abs(outputs_of(EXERCISE, no_qk_norm.impl, inputs)[QK_GROWN]).max()
        assert kept < KEPT["atol"] / 10 and moved > 100 * KEPT["atol"], (kept, moved)


# ---------------------------------------------------------------------------------------------
# Library shortcuts and the untouched release

SDPA = (
    "\n\n    def attention(self, x):\n"
    "        q = self.q_norm(self._heads(self.q_proj(x)))\n"
    "        k = self.k_norm(self._heads(self.k_proj(x)))\n"
    "        identity = torch.eye(x.shape[1], dtype=x.dtype).expand(*q.shape[:-1], -1)\n"
    "        return F.scaled_dot_product_attention(q, k, identity)\n"
)


@pytest.mark.parametrize("with_source", [True, False], ids=["source", "no source"])
def test_torchs_attention_earns_zero_even_when_the_source_is_invisible(with_source):
    """The demo's fallback, torch's fused attention, is what the exercise forbids."""
    source = SOLUTION + SDPA  # the later attention replaces the solution's
    verdict = graded(source, with_source=with_source)
    assert verdict.score == 0 and "earns no points" in verdict.render(), verdict.render()


def test_the_untouched_release_fails_every_check_in_plain_words():
    notebook = read_notebook(notebook_path(RELEASE, ASSIGNMENT))
    stub = answer(answer_source(notebook, NAME))
    outputs, _ = call(EXERCISE, stub, plan(EXERCISE, hidden=False, seed=0)[0][1])
    assert isinstance(outputs, StudentError) and outputs.kind == "NotImplementedError"
    verdict = run(EXERCISE, stub, hidden=True, seed=0, source="")
    assert verdict.score == 0 and "not implemented yet" in verdict.render()

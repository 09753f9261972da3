"""Tests for norm_utils.data (seeded toy data) and norm_utils.plotting (figure helpers)."""

import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from mpl_toolkits.mplot3d import Axes3D

from norm_utils.data import (
    IGNORE_INDEX,
    SEP,
    copy_task_batch,
    random_token_batches,
    variable_length_batch,
)
from norm_utils.plotting import (
    NORM_KINDS,
    POOLED_RGBA,
    REFERENCE_RGBA,
    plot_histograms,
    plot_normalized_sets,
    plot_per_layer,
    pooled_set,
)

matplotlib.use("Agg")

# Each generator as a function of its seed only, so one test checks all of them.
GENERATORS = {
    "random_token_batches": lambda seed: random_token_batches(3, 4, 9, vocab_size=50, seed=seed),
    "copy_task_batch": lambda seed: copy_task_batch(4, 5, vocab_size=20, seed=seed),
    "variable_length_batch": lambda seed: variable_length_batch([5, 2, 7], dim=3, seed=seed),
}


def _flat(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple | list) else [out]


# --------------------------------------------------------------------------------------------
# data.py


@pytest.mark.parametrize("name", GENERATORS)
def test_same_seed_same_data_different_seed_different_data(name):
    make = GENERATORS[name]
    first, again, other = _flat(make(0)), _flat(make(0)), _flat(make(1))
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize("name", GENERATORS)
def test_generators_leave_the_global_rng_alone(name):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    GENERATORS[name](0)
    assert torch.equal(torch.rand(3), expected)


def test_random_token_batches_shape_dtype_range():
    batches = random_token_batches(3, 4, 9, vocab_size=50, seed=0)
    assert batches.shape == (3, 4, 9) and batches.dtype == torch.int64
    assert 0 <= batches.min() and batches.max() < 50


def test_copy_task_batch_structure():
    k, vocab = 5, 20
    inputs, targets = copy_task_batch(4, k, vocab_size=vocab, seed=0)
    assert inputs.shape == targets.shape == (4, 2 * k)
    assert inputs.dtype == targets.dtype == torch.int64
    assert (inputs[:, :k] != SEP).all() and (inputs[:, :k] < vocab).all()
    assert (inputs[:, k] == SEP).all()
    assert torch.equal(inputs[:, k + 1 :], inputs[:, : k - 1])  # the copy, shifted by one
    assert (targets[:, :k] == IGNORE_INDEX).all()
    assert torch.equal(targets[:, k:], inputs[:, :k])  # after SEP, predict the copy


def test_copy_task_targets_work_with_cross_entropy():
    _, targets = copy_task_batch(8, 6, vocab_size=11, seed=0)
    uniform_logits = torch.zeros(*targets.shape, 11)
    loss = torch.nn.functional.cross_entropy(uniform_logits.flatten(0, 1), targets.flatten())
    assert loss.item() == pytest.approx(math.log(11))  # ignored targets do not count


def test_variable_length_batch_shapes_and_nonzero_mean():
    seqs = variable_length_batch([50, 1, 300], dim=4, seed=0, mean=3.0, std=2.0)
    assert [tuple(s.shape) for s in seqs] == [(50, 4), (1, 4), (300, 4)]
    assert all(s.dtype == torch.float32 for s in seqs)
    tokens = torch.cat(seqs)  # (351, 4)
    torch.testing.assert_close(tokens.mean(0), torch.full((4,), 3.0), atol=0.35, rtol=0)


# --------------------------------------------------------------------------------------------
# plotting.py


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_pooled_set_sizes_match_each_method():
    n, c, hw, g = 4, 6, 5, 3
    sizes = {kind: int(pooled_set(kind, n, c, hw, num_groups=g).sum()) for kind in NORM_KINDS}
    assert sizes == {
        "BatchNorm": n * hw,
        "LayerNorm": c * hw,
        "InstanceNorm": hw,
        "GroupNorm": (c // g) * hw,
    }


def test_pooled_set_group_norm_limits_and_group_of_a_channel():
    n, c, hw = 2, 6, 3
    layer, instance = pooled_set("LayerNorm", n, c, hw), pooled_set("InstanceNorm", n, c, hw)
    assert np.array_equal(pooled_set("GroupNorm", n, c, hw, num_groups=1), layer)
    assert np.array_equal(pooled_set("GroupNorm", n, c, hw, num_groups=c), instance)
    channels = pooled_set("GroupNorm", n, c, hw, num_groups=3, at=(1, 3)).any(axis=(0, 2))
    assert channels.tolist() == [False, False, True, True, False, False]
    with pytest.raises(ValueError, match="divide"):
        pooled_set("GroupNorm", n, c, hw, num_groups=4)


def test_plot_normalized_sets_shades_the_pooled_cells():
    n, c, hw, g = 3, 4, 2, 2
    fig = plot_normalized_sets(n, c, hw, num_groups=g)
    assert len(fig.axes) == 4 and all(isinstance(ax, Axes3D) for ax in fig.axes)
    assert [ax.get_title() for ax in fig.axes] == [*NORM_KINDS[:3], "GroupNorm (G=2)"]
    for ax, kind in zip(fig.axes, NORM_KINDS, strict=True):
        assert len(ax.collections) == n * c * hw  # one voxel per tensor entry
        faces = [col.get_facecolor()[0] for col in ax.collections]
        shaded = sum(np.allclose(face, POOLED_RGBA) for face in faces)
        marked = sum(np.allclose(face, REFERENCE_RGBA) for face in faces)
        # One element marked: it and the blue cells are the set that shares its statistics.
        assert (marked, shaded + marked) == (1, pooled_set(kind, n, c, hw, num_groups=g).sum())
        assert (ax.get_xlabel(), ax.get_zlabel()) == ("C", "N")


def test_plot_histograms_draws_both_on_shared_bins():
    before = 3 * torch.randn(500, requires_grad=True) + 2  # a tensor in the graph is fine
    after = (before - before.mean()) / before.std()
    ax = plt.subplots()[1]
    assert plot_histograms(before, after, ax=ax, bins=20) is ax
    assert len(ax.patches) == 40
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["before", "after"]
    assert ax.get_xlabel() and ax.get_ylabel()
    left_edges = [p.get_x() for p in ax.patches]
    assert left_edges[:20] == left_edges[20:]  # one set of bin edges for both


def test_plot_per_layer_one_line_per_label():
    values = {"Post-LN": [0.2, 0.3, 0.4], "Pre-LN": [0.3, 0.2, 0.1]}
    ax = plot_per_layer(values, ylabel="grad norm", logy=True)
    assert [line.get_label() for line in ax.get_lines()] == ["Post-LN", "Pre-LN"]
    assert list(ax.get_lines()[1].get_xdata()) == [1, 2, 3]
    assert list(ax.get_lines()[1].get_ydata()) == [0.3, 0.2, 0.1]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_yscale()) == ("layer", "grad norm", "log")
    assert plot_per_layer(values).get_yscale() == "linear"

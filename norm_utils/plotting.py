"""Small matplotlib helpers shared by the notebooks.

Each function draws on the Axes or Figure it is given (or makes a new one) and returns it; none
calls ``plt.show()`` or changes rcParams, so notebooks stay in control of styling.
"""

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

__all__ = [
    "NORM_KINDS",
    "plot_against_depth",
    "plot_histograms",
    "plot_normalized_sets",
    "plot_per_layer",
    "pooled_set",
]

NORM_KINDS = ("BatchNorm", "LayerNorm", "InstanceNorm", "GroupNorm")
POOLED_RGBA = (0.2, 0.45, 0.85, 1.0)  # opaque blue: the set that shares one mean and variance
OTHER_RGBA = (0.92, 0.92, 0.92, 0.25)  # faint grey, so pooled cells inside the cube show through
REFERENCE_RGBA = (0.9, 0.45, 0.1, 1.0)  # opaque orange: the one element the set normalizes
EDGE_RGBA = (0.3, 0.3, 0.3, 0.5)


def pooled_set(
    kind: str, n: int, c: int, hw: int, num_groups: int = 2, at: tuple[int, int] = (0, 0)
) -> np.ndarray:
    """Boolean mask over an ``(N, C, H*W)`` tensor: the entries whose mean and variance
    normalize the element at sample ``at[0]``, channel ``at[1]`` (any spatial position).

    BatchNorm pools one channel over the batch and space, LayerNorm one sample over channels and
    space, InstanceNorm one sample and one channel over space, GroupNorm one sample over the
    ``c // num_groups`` channels of a group and space (Wu & He 2018, Fig. 2).

    Example:
        >>> int(pooled_set("BatchNorm", n=4, c=6, hw=5).sum())  # N * H*W
        20
    """
    if c % num_groups:
        raise ValueError(f"num_groups ({num_groups}) must divide the channels ({c})")
    i, j = at
    size = c // num_groups  # channels per group
    group = slice(j // size * size, (j // size + 1) * size)
    mask = np.zeros((n, c, hw), dtype=bool)
    where = {
        "BatchNorm": (slice(None), j),
        "LayerNorm": (i, slice(None)),
        "InstanceNorm": (i, j),
        "GroupNorm": (i, group),
    }[kind]
    mask[where] = True
    return mask


def plot_normalized_sets(
    n: int = 4, c: int = 6, hw: int = 3, num_groups: int = 2, fig: Figure | None = None
) -> Figure:
    """The GroupNorm paper's Figure 2: one cube per method, the pooled entries in blue.

    Each cube is an ``(N, C, H*W)`` activation tensor. The orange cell is one element (sample 0,
    channel 0, position 0); the blue cells are normalized with the same mean and variance as it
    (Wu & He 2018, https://arxiv.org/abs/1803.08494). Returns a Figure with four 3-D Axes.
    """
    fig = fig if fig is not None else plt.figure(figsize=(12, 3.6), layout="constrained")
    for k, kind in enumerate(NORM_KINDS, start=1):
        ax = fig.add_subplot(1, len(NORM_KINDS), k, projection="3d")
        mask = pooled_set(kind, n, c, hw, num_groups).transpose(1, 2, 0)  # (C, H*W, N) = (x, y, z)
        colors = np.where(mask[..., None], POOLED_RGBA, OTHER_RGBA)  # (C, H*W, N, 4)
        colors[0, 0, 0] = REFERENCE_RGBA
        ax.voxels(np.ones_like(mask), facecolors=colors, edgecolor=EDGE_RGBA, shade=False)
        ax.set(xticks=[], yticks=[], zticks=[])
        # No tick labels: each axis label sits next to its edge, not where tick labels would go.
        ax.set_xlabel("C", labelpad=-14)
        ax.set_ylabel("H, W", labelpad=-14)
        ax.set_zlabel("N", labelpad=-14)
        ax.set_box_aspect((c, hw, n), zoom=0.9)
        ax.view_init(elev=20, azim=-35)
        ax.set_title(kind if kind != "GroupNorm" else f"GroupNorm (G={num_groups})")
    legend = {
        "one element (sample 0, channel 0)": REFERENCE_RGBA,
        "the values that share its mean and variance": POOLED_RGBA,
    }
    handles = [Patch(facecolor=rgba, edgecolor=EDGE_RGBA) for rgba in legend.values()]
    fig.legend(handles, list(legend), loc="outside lower center", ncols=2, frameon=False)
    return fig


def plot_histograms(
    before: torch.Tensor | np.ndarray,
    after: torch.Tensor | np.ndarray,
    ax: Axes | None = None,
    bins: int = 60,
) -> Axes:
    """Overlaid density histograms of activations before and after a normalization.

    Both share one set of bin edges, so bar widths compare directly.
    """
    ax = ax if ax is not None else plt.subplots(figsize=(5, 3.2))[1]
    before, after = (torch.as_tensor(v).detach().flatten().numpy() for v in (before, after))
    edges = np.histogram_bin_edges(np.concatenate([before, after]), bins=bins)
    ax.hist(before, bins=edges, density=True, alpha=0.55, label="before")
    ax.hist(after, bins=edges, density=True, alpha=0.55, label="after")
    ax.set(xlabel="activation", ylabel="density")
    ax.legend()
    return ax


def plot_per_layer(
    values_by_label: dict[str, list[float]],
    ax: Axes | None = None,
    ylabel: str = r"$\|\nabla W\|_F$",
    logy: bool = False,
) -> Axes:
    """One line per label of a per-layer quantity (e.g. gradient norms), layers numbered from 1."""
    ax = ax if ax is not None else plt.subplots(figsize=(5, 3.2))[1]
    for label, values in values_by_label.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=label)
    ax.set(xlabel="layer", ylabel=ylabel, yscale="log" if logy else "linear")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend()
    return ax


def plot_against_depth(
    values_by_label: dict[str, list[float]],
    depths: tuple[int, ...],
    ax: Axes | None = None,
    ylabel: str = "",
    logy: bool = False,
) -> Axes:
    """One line per label of a quantity measured at each of ``depths`` (numbers of layers), on a
    log depth axis ticked at those depths."""
    ax = ax if ax is not None else plt.subplots(figsize=(5, 3.2))[1]
    for label, values in values_by_label.items():
        ax.plot(depths, values, marker="o", label=label)
    ax.set(
        xscale="log", xlabel="number of layers", ylabel=ylabel, yscale="log" if logy else "linear"
    )
    ax.minorticks_off()
    ax.set_xticks(depths, [str(n) for n in depths])
    ax.legend()
    return ax

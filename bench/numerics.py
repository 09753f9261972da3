"""How accurate and how fast the reference LayerNorm is, next to PyTorch's and the naive formula.

Accuracy: float32 rows with mean 0, 1e2, 1e3, 1e4 and std 1, normalized by the reference
`layer_norm` (`grader.reference`), `torch.nn.functional.layer_norm` and the one-pass E[x²]−E[x]²
formula;
the error is the largest absolute difference from the float64 LayerNorm of the *same* float32
input (so only the arithmetic is judged, not the rounding of the input).

Speed: both LayerNorms on a (4096, 1024) float32 input, median of repeats, with one intra-op
thread and with torch's default.

    .venv/bin/python bench/numerics.py [options]

"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_parser, load_1min, markdown_table, print_header, progress

from grader.reference import functional as reference

OFFSETS = (0.0, 1e2, 1e3, 1e4)
EPS = 1e-5

LayerNorm = Callable[[Tensor, int, Tensor | None, Tensor | None], Tensor]


def naive_layer_norm(x: Tensor, n: int, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """LayerNorm with the one-pass variance E[x²]−E[x]²: the textbook formula that cancels."""
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    y = (x - mean) / torch.sqrt(var + EPS)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def reference_layer_norm(x: Tensor, n: int, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    return reference.layer_norm(x, n, weight, bias, EPS)


def torch_layer_norm(x: Tensor, n: int, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    return F.layer_norm(x, (n,), weight, bias, EPS)


IMPLEMENTATIONS: dict[str, LayerNorm] = {
    "reference layer_norm": reference_layer_norm,
    "torch F.layer_norm": torch_layer_norm,
    "naive E[x²]−E[x]²": naive_layer_norm,
}


def shifted_rows(rows: int, features: int, offset: float, seed: int) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, features, generator=gen, dtype=torch.float64) + offset).float()


def affine(features: int, seed: int) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randn(features, generator=gen) * 0.5 + 1, torch.randn(features, generator=gen)


def errors(fn: LayerNorm, x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """fn(x) − truth in float64; truth is the float64 LayerNorm of the same float32 input."""
    n = x.shape[-1]
    w64 = None if weight is None else weight.double()
    b64 = None if bias is None else bias.double()
    truth = F.layer_norm(x.double(), (n,), w64, b64, EPS)
    return fn(x, n, weight, bias).double() - truth


def max_and_rms(err: Tensor) -> tuple[float, float]:
    """Largest and root-mean-square |error|; NaN (a negative naive variance) counts as infinite."""
    if not torch.isfinite(err).all():
        return float("inf"), float("inf")
    return err.abs().max().item(), err.square().mean().sqrt().item()


def accuracy_rows(rows: int, features: int, seeds: int, with_affine: bool) -> list[list[object]]:
    """One row per offset: each implementation's worst max error, and its worst RMS error, over
    `seeds` independent draws. The verdict compares the max errors, as the target states."""
    table = []
    for offset in OFFSETS:
        worst = {name: [0.0, 0.0] for name in IMPLEMENTATIONS}
        for seed in range(seeds):
            x = shifted_rows(rows, features, offset, seed)
            weight, bias = affine(features, seed) if with_affine else (None, None)
            for name, fn in IMPLEMENTATIONS.items():
                top, rms = max_and_rms(errors(fn, x, weight, bias))
                worst[name] = [max(worst[name][0], top), max(worst[name][1], rms)]
        ours, ref = worst["reference layer_norm"], worst["torch F.layer_norm"]
        verdict = "yes" if ours[0] <= ref[0] else f"no ({ours[0] / ref[0]:.2f}× torch's)"
        table.append(
            [
                f"{offset:g}",
                *(f"{worst[name][0]:.3g}" for name in IMPLEMENTATIONS),
                f"{ours[1]:.3g} / {ref[1]:.3g}",
                verdict,
            ]
        )
    return table


def median_seconds(fn: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """Median, min and max wall time of `fn` over `repeats` calls, after two warm-up calls."""
    fn(), fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times)


def speed_rows(repeats: int, thread_counts: list[int]) -> list[list[object]]:
    x = shifted_rows(4096, 1024, 0.0, seed=0)
    weight, bias = affine(1024, seed=0)
    table = []
    for threads in thread_counts:
        torch.set_num_threads(threads)
        load = load_1min()
        timings = {
            name: median_seconds(lambda fn=fn: fn(x, 1024, weight, bias), repeats)
            for name, fn in IMPLEMENTATIONS.items()
            if name != "naive E[x²]−E[x]²"
        }
        ref, tch = timings["reference layer_norm"], timings["torch F.layer_norm"]
        table.append(
            [
                threads,
                f"{ref[0] * 1e3:.2f} ({ref[1] * 1e3:.2f}–{ref[2] * 1e3:.2f})",
                f"{tch[0] * 1e3:.2f} ({tch[1] * 1e3:.2f}–{tch[2] * 1e3:.2f})",
                f"{ref[0] / tch[0]:.1f}×",
                f"{load:.2f} → {load_1min():.2f}",
            ]
        )
    return table


def arguments() -> argparse.ArgumentParser:
    parser = bench_parser(__doc__)
    parser.add_argument("--rows", type=int, default=1024, help="rows per draw (accuracy)")
    parser.add_argument("--features", type=int, default=1024, help="normalized size (accuracy)")
    parser.add_argument("--seeds", type=int, default=5, help="independent draws per offset")
    parser.add_argument("--repeats", type=int, default=50, help="timed calls per measurement")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)

    default_threads = torch.get_num_threads()
    print_header("Numerics of the reference LayerNorm")
    met = True
    for with_affine in (False, True):
        label = "random γ and β" if with_affine else "no γ, β (the normalization alone)"
        progress(f"accuracy, {label} ...")
        load = load_1min()
        accuracy = accuracy_rows(args.rows, args.features, args.seeds, with_affine)
        print(
            f"### Accuracy, {label}: max |error| vs the float64 LayerNorm of the same input "
            f"({args.seeds} draws of ({args.rows}, {args.features}) float32, std 1, "
            f"ε = {EPS:g}; load {load:.2f})\n"
        )
        header = [
            "row mean",
            *(f"{name} max" for name in IMPLEMENTATIONS),
            "RMS error: reference / torch",
            "reference max ≤ torch max?",
        ]
        print(markdown_table(header, accuracy))
        print()
        met = met and all(row[-1] == "yes" for row in accuracy)
    print(
        "`inf`: the naive variance came out negative, so the output holds NaN. The reference "
        "computes in float64 and rounds once, so its error is at most half the float32 spacing "
        "of each output (2.4e-7 for outputs in [2, 4)) whatever the offset.\n"
    )
    print(f"Target (reference at least as accurate as torch at every offset): {_met(met)}\n")

    progress("speed ...")
    threads = sorted({1, default_threads})
    print(
        f"### Speed: (4096, 1024) float32 with γ and β, forward only; median ms of "
        f"{args.repeats} calls (min–max)\n"
    )
    header = ["torch threads", "reference layer_norm ms", "F.layer_norm ms", "ref / torch", "load"]
    print(markdown_table(header, speed_rows(args.repeats, threads)))
    print(f"\ntorch's default here is {default_threads} intra-op threads.")
    torch.set_num_threads(default_threads)
    return 0


def _met(met: bool) -> str:
    return "**met**" if met else "**not met**"


if __name__ == "__main__":
    sys.exit(main())

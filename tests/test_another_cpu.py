"""tests/another_cpu.py, which `make test-portable` runs the solutions under, moves what it must."""

from __future__ import annotations

import torch
from another_cpu import ULP_STEPS, AnotherCpu


def _ulps(moved: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    return (moved - exact).abs() / torch.finfo(exact.dtype).eps / exact.abs()


def test_a_reduction_moves_by_its_ulps_and_the_same_computation_stays_the_same():
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    exact = x.sum(1)
    with AnotherCpu():
        moved, again = x.sum(1), x.sum(1)
    assert torch.equal(moved, again)
    assert ((_ulps(moved, exact) > 0.4 * ULP_STEPS) & (_ulps(moved, exact) < 2 * ULP_STEPS)).all()


def test_exact_results_stay():
    """IEEE's correctly rounded operations, a value with few bits, a mean of one term."""
    x = torch.randn(1, 5, generator=torch.Generator().manual_seed(0))
    plain = x * 3 + 1
    with AnotherCpu():
        assert torch.equal(x * 3 + 1, plain)
        assert torch.equal(torch.tensor([1.0, 3.0]).mean(), torch.tensor(2.0))
        assert torch.equal(x.mean(0), x[0])

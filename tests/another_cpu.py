"""Another CPU's rounding, on this one: every torch result whose last bits depend on the CPU
(reductions, matrix products, transcendental functions, the fused kernels built of them) moved
by a few units in the last place, deterministically in its value, so that the same computation
still gives the same result. IEEE's basic operations (+, −, ×, ÷, √ of two values) are
correctly rounded on every CPU and are left alone.

Run as a script, it runs pytest (the solution notebooks under nbval) with every kernel so
rounded, through a throwaway IPython startup folder::

    python tests/another_cpu.py 2 solutions/ -n 2 --dist loadfile   # ULP_STEPS=2, then pytest's
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

# ulps a result moves (negative: the other way); a CPU rounding differently by a unit or two.
ULP_STEPS = int(os.environ.get("ANOTHER_CPU_ULPS", "2"))
# Results whose rounding follows the CPU: the summation order, the blocking of a matrix
# product, a vectorized library's exp/log/tanh.
CPU_DEPENDENT = frozenset(
    """sum mean var std var_mean std_mean norm nansum nanmean cumsum prod logsumexp
    matmul mm bmm addmm baddbmm linear bilinear einsum dot mv tensordot conv1d conv2d
    softmax log_softmax exp log log1p expm1 tanh sigmoid gelu silu erf pow rsqrt
    layer_norm batch_norm group_norm instance_norm rms_norm cross_entropy nll_loss mse_loss
    scaled_dot_product_attention multi_head_attention_forward randn randn_like normal""".split()
)


# Low mantissa bits all zero: a value with few significant bits, which exact data gives exactly
# in any order (the mean of (1, 3); a sum of one term). A rounded value ends so 1 time in 2**k.
SHORT_MANTISSA = {torch.float32: 0xFF, torch.float64: 0xFFFF}


def _moved(result: torch.Tensor) -> torch.Tensor:
    """`result` moved by ULP_STEPS ulps, up or down as a bit of each value says; values with few
    significant bits stay."""
    bits = result.detach().view(torch.int32 if result.dtype == torch.float32 else torch.int64)
    down = (bits >> 3) & 1
    rounded = (bits & SHORT_MANTISSA[result.dtype]) != 0
    ulp = torch.nextafter(result.detach(), torch.full_like(result, float("inf"))) - result.detach()
    step = ULP_STEPS * ulp * (1 - 2 * down).to(result.dtype)
    return result + torch.where(torch.isfinite(step) & rounded, step, 0.0)


def _name(func) -> str:
    return getattr(func, "__name__", "").removesuffix("_")


def _reduced_nothing(result: torch.Tensor, args: tuple) -> bool:
    """A reduction over one term (the mean of a batch of one) is that term on any CPU."""
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return first is not None and first.numel() == result.numel() and first.dim() > result.dim()


class AnotherCpu(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if (
            _name(func) in CPU_DEPENDENT
            and isinstance(result, torch.Tensor)
            and result.dtype in (torch.float32, torch.float64)
            and not any(result is a for a in args)  # in place: its input was moved already
            and not _reduced_nothing(result, args)
        ):
            return _moved(result)
        return result


def install() -> None:
    AnotherCpu().__enter__()  # for the rest of the session


def run_pytest(ulps: int, args: list[str]) -> int:
    """pytest `args` with every IPython kernel it starts rounding as another CPU by `ulps`."""
    with tempfile.TemporaryDirectory() as ipython:
        startup = Path(ipython, "profile_default", "startup")
        startup.mkdir(parents=True)
        here = str(Path(__file__).resolve().parent)
        (startup / "00-another-cpu.py").write_text(
            f"import sys\nsys.path.insert(0, {here!r})\nimport another_cpu\nanother_cpu.install()\n"
        )
        env = {**os.environ, "IPYTHONDIR": ipython, "ANOTHER_CPU_ULPS": str(ulps)}
        return subprocess.call([sys.executable, "-m", "pytest", *args], env=env)


if __name__ == "__main__":
    sys.exit(run_pytest(int(sys.argv[1]), sys.argv[2:]))

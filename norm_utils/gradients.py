"""Gradients the backward exercises are compared with: finite differences and autograd."""

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["autograd_gradients", "numerical_grad"]


def numerical_grad(f: Callable[[Tensor], Tensor], x: Tensor, h: float = 1e-6) -> Tensor:
    r"""Central differences of the scalar function ``f`` at ``x``, one coordinate at a time.

    Needs nothing but the forward pass: coordinate :math:`i` of the gradient is
    :math:`(f(x + h e_i) - f(x - h e_i)) / 2h`, off by :math:`O(h^2)` from the derivative plus
    the rounding of ``f`` divided by :math:`h` (about 1e-9 in float64 with the default ``h``).

    Example::

        >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64)
        >>> numerical_grad(lambda t: (t**2).sum(), x)
        tensor([2.0000, 4.0000], dtype=torch.float64)
    """
    grad = torch.zeros_like(x)
    for i in range(x.numel()):
        nudge = torch.zeros_like(x)
        nudge.view(-1)[i] = h
        grad.view(-1)[i] = (f(x + nudge) - f(x - nudge)) / (2 * h)
    return grad


def autograd_gradients(
    forward: Callable[[Tensor, Tensor | None, Tensor | None], Tensor],
    grad_out: Tensor,
    x: Tensor,
    weight: Tensor | None = None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    r"""``(grad_x, grad_weight, grad_bias)`` of ``forward(x, weight, bias)`` by autograd.

    The bias is zeros of the weight's shape (its value does not change any gradient); without a
    weight there is no bias either, and the last two are ``None``.

    Example::

        >>> grads = autograd_gradients(
        ...     lambda x, w, b: F.layer_norm(x, (3,), w, b), torch.ones(2, 3), torch.randn(2, 3)
        ... )
        >>> grads[1] is None
        True
    """
    x = x.detach().requires_grad_()
    if weight is None:
        (grad_x,) = torch.autograd.grad(forward(x, None, None), x, grad_out)
        return grad_x, None, None
    weight = weight.detach().requires_grad_()
    bias = torch.zeros_like(weight, requires_grad=True)
    grad_x, grad_weight, grad_bias = torch.autograd.grad(
        forward(x, weight, bias), [x, weight, bias], grad_out
    )
    return grad_x, grad_weight, grad_bias

"""Gradients the backward exercises are compared with: finite differences and autograd.

`autograd_layer_norm_backward` and `autograd_batch_norm_backward` take the arguments of
notebooks 01's and 02's backward exercises: the demos use them while an exercise is a stub. The
checks refuse autograd in an answer, so calling them there earns nothing.
"""

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "autograd_batch_norm_backward",
    "autograd_gradients",
    "autograd_layer_norm_backward",
    "numerical_grad",
]


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


def autograd_layer_norm_backward(
    grad_out: Tensor,
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``(grad_x, grad_weight, grad_bias)`` of ``F.layer_norm`` by autograd."""

    def forward(x: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
        return F.layer_norm(x, normalized_shape, w, b, eps)

    return autograd_gradients(forward, grad_out, x, weight)


def autograd_batch_norm_backward(
    grad_out: Tensor,
    x: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    weight: Tensor | None = None,
    training: bool = False,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``(grad_x, grad_weight, grad_bias)`` of ``F.batch_norm`` by autograd, in training mode
    (the batch's statistics) or evaluation mode (the running ones, which it leaves unchanged)."""

    def forward(x: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
        stats = running_mean.clone(), running_var.clone()  # a training call updates them
        return F.batch_norm(x, *stats, w, b, training=training, eps=eps)

    return autograd_gradients(forward, grad_out, x, weight)

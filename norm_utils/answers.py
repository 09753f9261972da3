"""The demos after an exercise run the student's answer, or the library's while it is a stub.

A released notebook can then be run top to bottom before any exercise is done: each demo says,
in one line, that it used the library's version instead. Every library version the demos fall
back on is one the exercise itself forbids (an answer that calls it earns nothing), so nothing
here or in a demo is an answer.
"""

from collections.abc import Callable
from typing import Any

__all__ = ["yours_or"]


def yours_or(answer: Callable, library: Callable, library_name: str) -> Callable:
    r"""``answer`` where it is implemented, else ``library``, with a one-line note.

    Args:
        answer: the function or class an exercise asks for, as the notebook defines it.
        library: a function or class of the same signature computing the same thing.
        library_name: how the note names ``library``.

    Returns:
        A callable that calls ``answer`` and, on ``NotImplementedError`` (the stub of an
        unanswered exercise), prints the note once and calls ``library`` instead.

    Example::

        >>> def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
        ...     raise NotImplementedError()
        >>> ln = yours_or(layer_norm, F.layer_norm, "F.layer_norm")
        >>> ln(torch.ones(1, 2), (2,))
        `layer_norm` is not implemented yet: this cell uses F.layer_norm instead.
        tensor([[0., 0.]])
    """
    noted = False

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal noted
        try:
            return answer(*args, **kwargs)
        except NotImplementedError:
            if not noted:
                name = getattr(answer, "__name__", "this exercise")
                print(f"`{name}` is not implemented yet: this cell uses {library_name} instead.")
                noted = True
            return library(*args, **kwargs)

    return call

"""The demos after an exercise run the student's answer, or the library's while it is a stub.

A released notebook can then be run top to bottom before any exercise is done: each demo says,
in one line, that it used the library's version instead. Every library version the demos fall
back on is one the exercise itself forbids (an answer that calls it earns nothing), so nothing
here or in a demo is an answer.
"""

from collections.abc import Callable
from typing import Any

__all__ = ["yours_or"]


def _why_not(answer: Callable) -> str:
    """Why the demos should not use `answer`: '' when it passes its exercise's visible checks
    (or has none), else a few words ("not implemented yet", "fails 2 of 3 of its checks")."""
    from normcheck import source_of, visible  # the visible checks, with the stored outputs

    name = getattr(answer, "__name__", "")
    try:
        verdict = visible(name, answer, source_of(answer))
    except KeyError:
        return ""  # no exercise of that name: nothing to check it against
    if verdict.not_implemented:
        return "is not implemented yet"
    if verdict.integrity:
        return "earns no points (it calls what the exercise forbids)"
    failing = sum(not o.passed for o in verdict.outcomes)
    return f"fails {failing} of its {len(verdict.outcomes)} visible checks" if failing else ""


def yours_or(answer: Callable, library: Callable, library_name: str) -> Callable:
    r"""``answer`` where it passes its exercise's visible checks, else ``library``, with a
    one-line note: a wrong or partly written answer never breaks the demos after it.

    Args:
        answer: the function or class an exercise asks for, as the notebook defines it.
        library: a function or class of the same signature computing the same thing.
        library_name: how the note names ``library``.

    Returns:
        A callable that, the first time it is called, runs ``answer``'s visible checks (those
        of its ``check`` cell); if they fail, or ``answer`` later raises (a class partly written;
        but a ValueError, the refusal the exercises ask for, is the answer's to show), it prints
        the note once and calls ``library`` from then on.

    Example::

        >>> def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
        ...     raise NotImplementedError()
        >>> ln = yours_or(layer_norm, F.layer_norm, "F.layer_norm")
        >>> ln(torch.ones(1, 2), (2,))
        `layer_norm` is not implemented yet: this cell uses F.layer_norm instead.
        tensor([[0., 0.]])
    """
    name = getattr(answer, "__name__", "this exercise")
    chosen: list[Callable] = []

    def fall_back(why: str) -> Callable:
        print(f"`{name}` {why}: this cell uses {library_name} instead.")
        chosen[:] = [library]
        return library

    def call(*args: Any, **kwargs: Any) -> Any:
        if not chosen:
            why = _why_not(answer)
            if why:
                fall_back(why)
            else:
                chosen.append(answer)
        if chosen[0] is library:
            return library(*args, **kwargs)
        try:
            return answer(*args, **kwargs)
        except ValueError:  # the refusal the exercises ask for (an empty sequence's mean): shown
            raise
        except NotImplementedError:  # a stub, or a class with a method still to write
            return fall_back("is not implemented yet")(*args, **kwargs)
        except Exception as error:  # a case its visible checks did not try
            return fall_back(f"raised {type(error).__name__}")(*args, **kwargs)

    return call

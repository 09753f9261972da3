"""The demos after an exercise run the student's answer, or the library's while it is a stub.

A released notebook can then be run top to bottom before any exercise is done: each demo says,
in one line, that it used the library's version instead. Every library version the demos fall
back on is one the exercise itself forbids (an answer that calls it earns nothing), so nothing
here or in a demo is an answer.
"""

from collections.abc import Callable
from typing import Any

__all__ = ["YoursOr", "why_not_yours", "yours_or"]


def why_not_yours(answer: Callable) -> str:
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


class YoursOr:
    r"""``answer`` where it passes its exercise's visible checks, else ``library``, with a
    one-line note: a wrong or partly written answer never breaks the demos after it.

    Args:
        answer: the function or class an exercise asks for, as the notebook defines it.
        library: a function or class of the same signature computing the same thing.
        library_name: how the note names ``library``.

    Calling it runs, the first time, ``answer``'s visible checks (those of its ``check``
    cell); if they fail, or ``answer`` later raises (a class partly written; but a ValueError,
    the refusal the exercises ask for, is the answer's to show), it prints the note once and
    calls ``library`` from then on. ``used`` names the one it calls, so that a demo can print
    what it really compared: the library with itself, while the exercise is not done.

    Example::

        >>> def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
        ...     raise NotImplementedError()
        >>> ln = yours_or(layer_norm, F.layer_norm, "F.layer_norm")
        >>> ln(torch.ones(1, 2), (2,))
        `layer_norm` is not implemented yet: this cell uses F.layer_norm instead.
        tensor([[0., 0.]])
        >>> ln.used
        'F.layer_norm (in place of yours)'
    """

    def __init__(self, answer: Callable, library: Callable, library_name: str) -> None:
        self._answer, self._library, self._library_name = answer, library, library_name
        self._name = getattr(answer, "__name__", "this exercise")
        self._chosen: Callable | None = None

    @property
    def used(self) -> str:
        """What the calls go to, in words: "your `layer_norm`", or "F.layer_norm (in place of
        yours)" once the library stands in (choosing now if nothing was called yet)."""
        if self._choose() is self._library:
            return f"{self._library_name} (in place of yours)"
        return f"your `{self._name}`"

    def _choose(self) -> Callable:
        if self._chosen is None:
            why = why_not_yours(self._answer)
            self._chosen = self._fall_back(why) if why else self._answer
        return self._chosen

    def _fall_back(self, why: str) -> Callable:
        print(f"`{self._name}` {why}: this cell uses {self._library_name} instead.")
        self._chosen = self._library
        return self._library

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._choose() is self._library:
            return self._library(*args, **kwargs)
        try:
            return self._answer(*args, **kwargs)
        except ValueError:  # the refusal the exercises ask for (an empty sequence's mean): shown
            raise
        except NotImplementedError:  # a stub, or a class with a method still to write
            return self._fall_back("is not implemented yet")(*args, **kwargs)
        except Exception as error:  # a case its visible checks did not try
            return self._fall_back(f"raised {type(error).__name__}")(*args, **kwargs)


def yours_or(answer: Callable, library: Callable, library_name: str) -> YoursOr:
    """The student's ``answer`` in a demo, or ``library`` while it is not done (`YoursOr`)."""
    return YoursOr(answer, library, library_name)

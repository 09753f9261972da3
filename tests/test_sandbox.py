"""The sandbox refuses to grade when its runner cannot start, instead of scoring everyone 0.

What the sandbox keeps out is tested by the attacks in test_adversarial.py; that it changes no
honest score, in test_grading.py.
"""

from __future__ import annotations

import pytest

from grader.config import REPO
from grader.sandbox import Sandbox, SandboxUnavailable, _closed_to_others, available

needs_bwrap = pytest.mark.skipif(not available(), reason="bubblewrap is not installed")


@needs_bwrap
def test_a_sandbox_whose_runner_starts_is_accepted():
    Sandbox(hidden=[], slots=1)


@needs_bwrap
def test_a_runner_that_cannot_start_is_refused_with_the_reason():
    # Hiding the grader's own code stands for any reason the runner cannot import it.
    with pytest.raises(SandboxUnavailable) as refused:
        Sandbox(hidden=[REPO / "grader"], slots=1)
    message = str(refused.value)
    assert "cannot start, so every student would score 0" in message
    assert "ModuleNotFoundError: No module named 'grader" in message
    assert "--unsafe-no-sandbox" in message


def test_a_checkout_closed_to_others_is_named(tmp_path):
    # A checkout in a private folder (mode 700, e.g. made by mkdtemp or under umask 077) cannot
    # be read by the runner's unprivileged uid.
    checkout = tmp_path / "course"
    checkout.mkdir(mode=0o700)
    assert _closed_to_others([checkout]) == [checkout]
    checkout.chmod(0o755)
    assert _closed_to_others([checkout]) == []

"""Grading: the sandbox, pre-started runners, the runner client, plan → run → judge."""

"""Checks for notebook 03 (variable-length sequences and masks)."""

from grader.checks.core import Exercise

EXERCISES: tuple[Exercise, ...] = ()

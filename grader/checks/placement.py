"""Checks for notebook 04 (Pre-LN vs Post-LN placement)."""

from grader.checks.core import Exercise

EXERCISES: tuple[Exercise, ...] = ()

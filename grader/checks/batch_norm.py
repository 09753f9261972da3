"""Checks for notebook 02 (BatchNorm vs LayerNorm)."""

from grader.checks.core import Exercise

EXERCISES: tuple[Exercise, ...] = ()

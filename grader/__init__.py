"""The course's grader, one folder per step of the pipeline (docs/architecture.md)."""

"""The code that runs in the student's process while grading: the runner, the probes that call
an answer, and the format of what it sends back.

It imports only the standard library, numpy and torch, never the rest of `grader`: the sandbox
shows this package alone (as the top-level package `sandboxed`), so that no check, reference
implementation or answer key is loaded, or importable, where student code runs. Its modules
import each other relatively, so they work under either name.
"""

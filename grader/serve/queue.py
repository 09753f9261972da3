"""The grading queue: a Celery app on a Redis broker, and the one task it runs, which grades a
submitted notebook in the sandbox and returns the results (a worker never writes the gradebook:
the service records what it returns).

A worker, on this machine or another holding the course's environment and bubblewrap:

    GRADER_BROKER=redis://HOST:6379/0 celery -A grader.serve.queue worker --concurrency 1

Its environment: GRADER_BROKER (the broker and result store, as `grader serve --broker`),
GRADER_SOURCE (the course source it grades against; default: the checkout's solutions/; it
must be the service's: a task graded against another is refused), GRADER_UNSAFE_NO_SANDBOX=1
(grade without bubblewrap: only for code you trust, as `grader autograde --unsafe-no-sandbox`).

Delivery: a task is acknowledged once graded (`acks_late`), so a worker killed mid-task leaves
it to be delivered again (`task_reject_on_worker_lost`; a whole worker lost, after the broker's
visibility timeout, within the 10 s between the workers' sweeps); each worker takes one task at
a time (`worker_prefetch_multiplier=1`). A task is keyed by its submission's fingerprint:
delivered twice, it is graded twice and recorded once, by the service.
"""

from __future__ import annotations

import base64
import os
import tempfile
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

from grader.autograde import sandboxed
from grader.course import Results, notebook_path
from grader.course.config import SOLUTIONS, fresh_seed
from grader.course.intake import Submission
from grader.grading.grade import GraderFault, Limits, grade_in_one_runner
from grader.grading.prestarted import prestarted

# Seconds a task taken by a worker that vanished (killed with its pool) waits to be delivered
# again; longer than any grading takes (a looping answer is stopped after its timeout).
VISIBILITY_SECONDS = float(os.environ.get("GRADER_VISIBILITY_SECONDS", "300"))
TASK = "grader.serve.grade"

app = Celery("grader.serve")
app.conf.update(
    broker_url=os.environ.get("GRADER_BROKER", "redis://localhost:6379/0"),
    result_backend=os.environ.get("GRADER_BROKER", "redis://localhost:6379/0"),
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_track_started=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=7 * 24 * 3600,
    # The workers sweep for tasks past their visibility timeout every 10 s (kombu's default
    # interval), each sweep a scan: its default throttle of 10 would leave a lost worker's task
    # up to 100 s more in the broker.
    broker_transport_options={
        "visibility_timeout": VISIBILITY_SECONDS,
        "unacked_restore_interval": 10,
        "unacked_restore_throttle": 1,
    },
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


class Grading:
    """What grades a notebook in this process: the course source, the sandbox and its
    pre-started runners (kept for the process's life), the limits."""

    def __init__(self, source: Path, sandbox, limits: Limits) -> None:
        self.source, self.sandbox, self.limits = source, sandbox, limits
        self._open = ExitStack()
        self.scratch = Path(tempfile.mkdtemp(prefix="grader-serve-"))
        self._open.enter_context(prestarted(sandbox, self.scratch))

    def close(self) -> None:
        self._open.close()

    def grade(self, assignment: str, notebook: bytes, fingerprint: str) -> dict:
        """The results of grading `notebook` (an answer to `assignment`), as `Results` stores
        them. Raises GraderFault when the grader, not the notebook, failed, or when this
        process's course source is not the one the service fingerprinted the submission with."""
        with tempfile.TemporaryDirectory(prefix="submission-", dir=self.scratch) as folder:
            # <submissions>/<student>/<assignment>/<notebook>: the layout a submission is read in
            path = notebook_path(Path(folder) / "student", assignment)
            path.parent.mkdir(parents=True)
            path.write_bytes(notebook)
            submission = Submission.read(path, assignment, self.source)
            if submission.fingerprint != fingerprint:
                raise GraderFault(
                    f"this grader's course source ({self.source}) is not the service's: "
                    "install the same course on every grading host"
                )
            seed = fresh_seed()
            (exercises,) = grade_in_one_runner(
                [submission], seed, self.limits, self.sandbox, scratch=self.scratch
            )
        return asdict(Results(exercises, fingerprint, submission.problem, seed))


def worker_grading() -> Grading:
    """A worker's grading, as its environment says (see the module's docstring)."""
    source = Path(os.environ.get("GRADER_SOURCE", SOLUTIONS)).resolve()
    if os.environ.get("GRADER_UNSAFE_NO_SANDBOX") == "1":
        return Grading(source, None, Limits())
    return Grading(source, *sandboxed(source))


_grading: list[Grading] = []  # this worker process's, made when it starts


@worker_process_init.connect
def _start_grading(**_) -> None:
    _grading.append(worker_grading())


@worker_process_shutdown.connect
def _stop_grading(**_) -> None:
    while _grading:
        _grading.pop().close()


@app.task(name=TASK)
def grade(assignment: str, notebook: str, fingerprint: str) -> dict:
    """Celery's task: `notebook` is the submitted notebook's bytes, base64-encoded."""
    if not _grading:  # a solo pool runs tasks in the worker itself: no process_init
        _grading.append(worker_grading())
    return _grading[0].grade(assignment, base64.b64decode(notebook), fingerprint)


def encoded(notebook: bytes) -> str:
    return base64.b64encode(notebook).decode()

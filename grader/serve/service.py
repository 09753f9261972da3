"""`grader serve`: grade each submission as it arrives in the exchange, and give the student
their feedback, with no instructor command.

The loop, in one thread (the gradebook's only writer):
1. find what is pending: every whole submission in the exchange's inbound (grader.serve.exchange)
   of an assignment graded on submit, not yet in the service's ledger (serve/done/, one record per
   submission: graded, refused, superseded) and newer than what the gradebook holds for its
   student, so that a service or broker restarted loses nothing and grades nothing twice;
2. refuse what the course's limits refuse (grader.serve.policy), telling the student; of several
   submissions of one student's assignment waiting, grade the latest (nbgrader collects it);
3. collect the rest and hand them to the grader, in order of arrival: in this process, or to the
   Celery workers (grader.serve.queue) through the broker, by the same grading code;
4. record each result, in order of arrival, in nbgrader's gradebook (grader autograde's
   recording), write that student's feedback page and release it; log the outcome.
A grader fault is retried (with a growing wait) and never recorded; the student is told it will
be graded. Nothing is polled faster than POLL_SECONDS when there is nothing to do.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from pathlib import Path

import billiard.exceptions
import kombu.exceptions
import redis
from nbgrader.api import Gradebook
from traitlets.config import Config

from grader.autograde import register_all
from grader.course import Course, write_atomically
from grader.course.config import (
    BROKER_SOCKET_SECONDS,
    POLL_SECONDS,
    RETRY_SECONDS,
    WORKER_PING_SECONDS,
)
from grader.course.intake import Submission, submitted_bytes
from grader.course.intake import fingerprint as notebook_fingerprint
from grader.gradebook import records
from grader.gradebook.config import recording_api
from grader.grading.grade import GraderFault
from grader.publish.feedback import feedback_pages, render_page
from grader.serve import exchange, queue
from grader.serve.exchange import HandIn
from grader.serve.policy import GradeOnSubmit
from grader.serve.queue import Grading


def task_id(submission: str, fingerprint: str) -> str:
    """The queue's id of the task grading inbound submission `submission` against the source
    `fingerprint` names: the same for the same both, so a task sent again is the same task."""
    return hashlib.sha256(f"{submission}\0{fingerprint}".encode()).hexdigest()


@dataclass
class Job:
    hand_in: HandIn
    fingerprint: str
    notebook: bytes

    @property
    def task_id(self) -> str:
        return task_id(self.hand_in.name, self.fingerprint)


Finished = tuple[Job, dict | GraderFault]  # a job and its results, or why it was not graded


class InProcess:
    """Grades in the service's own process, one job per step: the one-box setup."""

    def __init__(self, grading: Grading) -> None:
        self.grading, self.waiting = grading, deque()

    def submit(self, job: Job) -> None:
        self.waiting.append(job)

    def poll(self) -> list[Finished]:
        if not self.waiting:
            return []
        job = self.waiting.popleft()
        try:
            return [(job, self.grading.grade(*_task_args(job, encode=False)))]
        except GraderFault as fault:
            return [(job, fault)]
        except Exception as error:  # the student's errors are results: anything else is ours
            return [(job, GraderFault(f"{type(error).__name__}: {error}"))]

    def status(self) -> dict:
        return {"queue": len(self.waiting), "workers": "in process"}

    def close(self) -> None:
        self.grading.close()


# How a task fails when the broker, not the grading, failed it: it is sent again, in its place.
BROKER_FAULTS = (
    ConnectionError,
    TimeoutError,
    redis.ConnectionError,
    redis.TimeoutError,
    kombu.exceptions.OperationalError,
    billiard.exceptions.WorkerLostError,
)


class Queued:
    """Grades through the broker: a task per job, to the Celery workers wherever they run.

    A task whose answer was lost (the broker restarted: Redis keeps neither the queue nor the
    results then; or it failed for the broker's reasons) is sent again; one the grading failed
    is the grader's fault, retried later by the service."""

    def __init__(self, broker: str) -> None:
        queue.app.conf.broker_url = queue.app.conf.result_backend = broker
        self.broker, self.redis = (
            broker,
            redis.Redis.from_url(broker, socket_timeout=BROKER_SOCKET_SECONDS),
        )
        self.sent: dict[str, Job] = {}  # by task id
        self.unsent: dict[str, Job] = {}
        self.broker_run: str | None = None

    def submit(self, job: Job) -> None:
        self.unsent[job.task_id] = job

    def poll(self) -> list[Finished]:
        finished: list[Finished] = []
        try:
            self._send_what_was_lost()
            for task_id, job in list(self.sent.items()):
                outcome = self._outcome(task_id)
                if outcome is not None:
                    finished.append((job, outcome))
                    del self.sent[task_id]
        except (redis.RedisError, kombu.exceptions.OperationalError):
            pass  # the broker is down: what is not heard of yet is asked again next time
        return finished

    def _send_what_was_lost(self) -> None:
        run = self.redis.info("server")["run_id"]  # a new one each time the broker starts
        if run != self.broker_run:  # (re)started since the tasks were sent: they are gone
            self.unsent |= self.sent
            self.sent, self.broker_run = {}, run
        for task_id, job in list(self.unsent.items()):
            queue.grade.apply_async(_task_args(job), task_id=task_id, retry=False)
            self.sent[task_id] = self.unsent.pop(task_id)

    def _outcome(self, task_id: str) -> dict | GraderFault | None:
        """The task's results, or the grader's fault; None while it is not done (or when it
        failed for the broker's reasons, and was sent again)."""
        result = queue.app.AsyncResult(task_id)
        state, value = result.state, result.result
        if state not in ("SUCCESS", "FAILURE"):
            return None
        result.forget()
        if state == "SUCCESS":
            return value
        if isinstance(value, BROKER_FAULTS):
            self.unsent[task_id] = self.sent.pop(task_id)
            self._send_what_was_lost()
            return None
        return GraderFault(f"{type(value).__name__}: {value}")

    def status(self) -> dict:
        try:
            length = self.redis.llen("celery")
        except redis.RedisError:
            length = None
        return {"queue": length, "broker": self.broker, "unsent": len(self.unsent)}

    def close(self) -> None:
        self.redis.close()


def _task_args(job: Job, encode: bool = True) -> tuple:
    notebook = queue.encoded(job.notebook) if encode else job.notebook
    return job.hand_in.assignment, notebook, job.fingerprint


@dataclass
class Ledger:
    """What the service decided of each submission, by its inbound name (serve/done/)."""

    folder: Path
    entries: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in self.folder.glob("*.json"):
            entry = json.loads(path.read_text())
            self.entries[entry["submission"]] = entry

    def put(self, hand_in: HandIn, outcome: str, **details) -> dict:
        entry = {
            "submission": hand_in.name,
            "student": hand_in.student,
            "assignment": hand_in.assignment,
            "submitted": hand_in.timestamp.isoformat(),
            "outcome": outcome,
            "at": datetime.now(UTC).isoformat(),
            "order": len(self.entries),
            **details,
        }
        self._write(entry)
        return entry

    def update(self, name: str, **details) -> None:
        """Change what is noted of submission `name` (an inbound name the ledger holds)."""
        self._write(self.entries[name] | details)

    def _write(self, entry: dict) -> None:
        name = hashlib.sha256(entry["submission"].encode()).hexdigest()[:32]
        write_atomically(self.folder / f"{name}.json", json.dumps(entry))
        self.entries[entry["submission"]] = entry

    def graded_times(self, student: str, assignment: str) -> list[datetime]:
        return [
            datetime.fromisoformat(e["submitted"])
            for e in self.entries.values()
            if e["outcome"] == "graded" and (e["student"], e["assignment"]) == (student, assignment)
        ]


@dataclass
class Fault:
    attempts: int
    retry_at: float
    cause: str


class Service:
    def __init__(
        self, course: Course, settings: Config, grader, log: Callable[[str], None] | None = None
    ) -> None:
        self.course, self.settings, self.grader = course, settings, grader
        self.policy = GradeOnSubmit(config=settings)
        self.ledger = Ledger(course.root / "serve" / "done")
        self.log = log or _log
        self.in_flight: dict[str, Job] = {}  # by inbound name, in order of arrival
        self.results: dict[str, dict] = {}  # finished, waiting for those before them
        self.faults: dict[str, Fault] = {}
        self.api = recording_api(course)
        self._due_dates: dict[str, datetime | None] = {}
        self._due_dates_read = -float("inf")  # monotonic time: read again once a minute

    # --- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Serve until `stop` is set; holds the course (no `grader autograde` meanwhile)."""
        with self.course.lock(), records.one_gradebook_session():
            register_all(self.course)
            self._settle_with_gradebook()
            while not stop.is_set():
                if not self.step():
                    stop.wait(POLL_SECONDS)
        self.grader.close()

    def step(self) -> bool:
        """Take in new submissions, record what was graded; whether anything happened."""
        busy = self._take_in()
        finished = self.grader.poll()
        for job, result in finished:
            if isinstance(result, GraderFault):
                self._fault(job, result)
            else:
                self.results[job.hand_in.name] = result
        recorded = self._record_in_order()
        released = self._release_after_due()
        self._write_status()
        return busy or bool(finished) or recorded or released

    # --- what is pending ---------------------------------------------------------------------

    def _settle_with_gradebook(self) -> None:
        """Submissions the gradebook holds (or a later one) but the ledger lacks, as after a
        stop between recording and noting it: noted, never graded again."""
        recorded = _recorded_times(self.settings)
        for hand_in in self._unsettled():
            held = recorded.get((hand_in.student, hand_in.assignment))
            if held is not None and held >= hand_in.timestamp:
                outcome = "graded" if held == hand_in.timestamp else "superseded"
                self.ledger.put(hand_in, outcome, note="found in the gradebook")

    def _unsettled(self) -> list[HandIn]:
        return [
            h
            for h in exchange.hand_ins(self.settings)
            if h.name not in self.ledger.entries and self.policy.graded_on_submit(h.assignment)
        ]

    def _take_in(self) -> bool:
        now, waiting = time.monotonic(), {}
        for hand_in in self._unsettled():  # in order of arrival: the last of each wins
            if hand_in.name in self.in_flight:
                continue
            fault = self.faults.get(hand_in.name)
            if fault and fault.retry_at > now:
                continue
            earlier = waiting.pop((hand_in.student, hand_in.assignment), None)
            if earlier is not None:
                self._supersede(earlier, hand_in)
            waiting[(hand_in.student, hand_in.assignment)] = hand_in
        busy = {(j.hand_in.student, j.hand_in.assignment) for j in self.in_flight.values()}
        taken = False
        for key, hand_in in waiting.items():
            if key in busy:  # one at a time per student's assignment: collect keeps the latest
                continue
            taken = True
            refusal = self.policy.refusal(hand_in.timestamp, self.ledger.graded_times(*key))
            if refusal:
                self._refuse(hand_in, refusal)
            else:
                self._send(hand_in)
        return taken

    def _send(self, hand_in: HandIn) -> None:
        exchange.collect(self.settings, hand_in)
        path = self._submitted(hand_in)
        try:
            notebook = submitted_bytes(path)
        except (OSError, ValueError):
            notebook = b""  # graded as what it is: unreadable, scored 0 with the reason
        source = self.course.source_notebook(hand_in.assignment)
        job = Job(hand_in, notebook_fingerprint(path, source), notebook)
        self.in_flight[hand_in.name] = job
        self.grader.submit(job)

    def _submitted(self, hand_in: HandIn) -> Path:
        return (
            self.course.submitted
            / hand_in.student
            / hand_in.assignment
            / (f"{hand_in.assignment}.ipynb")
        )

    # --- outcomes ----------------------------------------------------------------------------

    def _record_in_order(self) -> bool:
        recorded = False
        while self.in_flight:
            name, job = next(iter(self.in_flight.items()))
            if name not in self.results:
                break
            self._record(job, self.results.pop(name))
            del self.in_flight[name]
            recorded = True
        return recorded

    def _record(self, job: Job, result: dict) -> None:
        hand_in, course = job.hand_in, self.course
        path = course.results_file(hand_in.student, hand_in.assignment)
        write_atomically(path, json.dumps(result))
        submission = Submission.read(self._submitted(hand_in), hand_in.assignment, course.source)
        problem = records.record(course, self.api, submission, hand_in.student)
        if problem:
            self._fault(job, GraderFault(problem), in_flight=False)
            return
        visible = self.policy.visible_only(self._due_date(hand_in.assignment), _utc_now())
        score, max_score = self._release(hand_in.student, hand_in.assignment, visible)
        self.faults.pop(hand_in.name, None)
        latency = (_utc_now() - hand_in.timestamp).total_seconds()
        details = {"score": score, "max_score": max_score, "latency": latency}
        self.ledger.put(hand_in, "graded", **details, visible_only=visible)
        shown = "; released: its visible checks, until the due date" if visible else ""
        self.log(
            f"graded {hand_in.label}: {score:g} of {max_score:g} ({latency:.1f} s after submit)"
            + shown
        )

    def _due_date(self, assignment: str) -> datetime | None:
        """The assignment's due date as the gradebook holds it now (read at most once a minute:
        the instructor may move it while the service runs)."""
        if time.monotonic() - self._due_dates_read > 60:
            url, course_id = (
                self.settings.CourseDirectory.db_url,
                self.settings.CourseDirectory.course_id,
            )
            with Gradebook(url, course_id) as gradebook:
                self._due_dates = {a.name: a.duedate for a in gradebook.assignments}
            self._due_dates_read = time.monotonic()
        return self._due_dates.get(assignment)

    def _release_after_due(self) -> bool:
        """The full page for each student whose last graded submission was released with its
        visible checks only, once the assignment's due date has passed."""
        waiting = [e for e in self.ledger.entries.values() if e.get("visible_only")]
        released = False
        for entry in waiting:
            if self.policy.visible_only(self._due_date(entry["assignment"]), _utc_now()):
                continue
            later = [
                e
                for e in self.ledger.entries.values()
                if (e["student"], e["assignment"]) == (entry["student"], entry["assignment"])
                and e["outcome"] == "graded"
                and e["order"] > entry["order"]
            ]
            if not later:  # an older page was replaced by the later submission's
                self._release(entry["student"], entry["assignment"], visible_only=False)
                self.log(
                    f"released in full after the due date: {entry['student']}/{entry['assignment']}"
                )
                released = True
            self.ledger.update(entry["submission"], visible_only=False)
        return released

    def _release(self, student: str, assignment: str, visible_only: bool) -> tuple[float, float]:
        """Write the student's feedback page, headed with when it was graded, and release it;
        with `visible_only`, a page of the visible checks alone and no score."""
        (page,) = [p for p in feedback_pages(self.course, [student]) if p.assignment == assignment]
        render_page(page, visible_only=visible_only)
        score = page.score - page.late_penalty
        html = page.folder / f"{assignment}.html"
        shown = f"{score:g} of {page.max_score:g}"
        if visible_only:
            shown = "what your visible checks say; your grade is released after the due date"
        line = f"graded at {datetime.now(UTC):%Y-%m-%d %H:%M} UTC — {shown}"
        text = html.read_text()
        banner = f'<p class="graded-on-submit"><strong>{escape(line)}</strong></p>'
        html.write_text(text.replace("<body>", f"<body>\n{banner}", 1))
        exchange.release_feedback(self.settings, student, assignment)
        return score, page.max_score

    def _fault(self, job: Job, fault: GraderFault, in_flight: bool = True) -> None:
        """Never a grade: graded again after a wait; the student is told so once."""
        hand_in = job.hand_in
        self.in_flight.pop(hand_in.name, None)
        self.results.pop(hand_in.name, None)
        previous = self.faults.get(hand_in.name)
        attempts = previous.attempts + 1 if previous else 1
        wait = RETRY_SECONDS[min(attempts, len(RETRY_SECONDS)) - 1]
        self.faults[hand_in.name] = Fault(attempts, time.monotonic() + wait, str(fault))
        self.log(f"NOT GRADED {hand_in.label}: grader error ({fault}); again in {wait} s")
        if previous is None:
            message = (
                "Your submission could not be graded yet because of a problem on the grader's "
                "side, not yours. It will be graded automatically; fetch your feedback again "
                "in a few minutes."
            )
            exchange.release_message(self.settings, hand_in, _message_page(hand_in, message))

    def _refuse(self, hand_in: HandIn, reason: str) -> None:
        message = f"This submission was not graded: {reason}."
        exchange.release_message(self.settings, hand_in, _message_page(hand_in, message))
        self.ledger.put(hand_in, "refused", reason=reason)
        self.log(f"refused {hand_in.label}: {reason}")

    def _supersede(self, older: HandIn, newer: HandIn) -> None:
        message = (
            f"This submission was not graded: you submitted again at "
            f"{newer.timestamp:%Y-%m-%d %H:%M:%S} UTC before it was graded, and the later "
            "one is graded instead."
        )
        exchange.release_message(self.settings, older, _message_page(older, message))
        self.ledger.put(older, "superseded", by=newer.name)
        self.log(f"superseded {older.label}: submitted again")

    def _write_status(self) -> None:
        graded = [e for e in self.ledger.entries.values() if e["outcome"] == "graded"]
        last = max(graded, key=lambda e: e["order"], default=None)
        status = {
            "updated": datetime.now(UTC).isoformat(),
            "in_flight": len(self.in_flight),
            "graded": len(graded),
            "last_graded": last,
            "failures": {name: f.cause for name, f in self.faults.items()},
            **self.grader.status(),
        }
        write_atomically(status_file(self.course), json.dumps(status))


def status_file(course: Course) -> Path:
    return course.root / "serve" / "status.json"


def workers_on(broker: str) -> list[str]:
    """The names of the Celery workers answering on `broker` now."""
    queue.app.conf.broker_url = queue.app.conf.result_backend = broker
    try:
        return sorted(
            name for reply in queue.app.control.ping(timeout=WORKER_PING_SECONDS) for name in reply
        )
    except (redis.RedisError, kombu.exceptions.OperationalError):
        return []


def _message_page(hand_in: HandIn, message: str) -> str:
    title = f"{hand_in.assignment}: your submission of {hand_in.timestamp:%Y-%m-%d %H:%M:%S} UTC"
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"</head><body><h1>{escape(title)}</h1><p>{escape(message)}</p></body></html>\n"
    )


def _recorded_times(settings: Config) -> dict[tuple[str, str], datetime]:
    """When each student's recorded submission of each assignment was made (naive UTC, as
    nbgrader stores it)."""
    url, course_id = settings.CourseDirectory.db_url, settings.CourseDirectory.course_id
    with Gradebook(url, course_id) as gradebook:
        return {
            (s.student_id, s.assignment.name): s.timestamp
            for assignment in gradebook.assignments
            for s in assignment.submissions
            if s.timestamp is not None
        }


def _utc_now() -> datetime:
    """Now, naive in UTC, as nbgrader's exchange timestamps are read (nbgrader.utils.parse_utc)."""
    return datetime.now(UTC).replace(tzinfo=None)


def _log(line: str) -> None:
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} {line}", file=sys.stderr, flush=True)

"""`grader serve` on a real exchange: students submit with nbgrader's own submit, the service
grades (in the sandbox) and releases their feedback, which they fetch with nbgrader's own
fetch_feedback; no instructor command in between. Then the queue: a burst through a real Redis
and real Celery worker processes, one of them killed mid-burst and the broker restarted.

One course and one exchange for the module; one Redis for the session. Every submission is of the
first assignment (the shortest to grade)."""

from __future__ import annotations

import csv
import html
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import nbformat
import psycopg2
import pytest
from celery import Celery
from course_walk import COURSE_ID, hand_in, nbgrader
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange.default.submit import ExchangeSubmit
from traitlets.config import Config

from grader.autograde import register_all, sandboxed
from grader.cli import main
from grader.course import Course, Layout, fetched_feedback, notebook_path
from grader.course.config import assignments, use_this_environment
from grader.gradebook.config import course_settings, gradebook_url
from grader.grading.sandbox import available
from grader.release.demo import PROFILES
from grader.serve import service
from grader.serve.queue import Grading

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not available(), reason="bubblewrap is not installed"),
    pytest.mark.skipif(not shutil.which("redis-server"), reason="redis-server is not installed"),
    pytest.mark.skipif(
        not Path("/usr/lib/postgresql/15/bin/initdb").is_file(),
        reason="PostgreSQL is not installed",
    ),
]

ASSIGNMENT = assignments()[0]
# The burst is 100: bench/submit_latency.py measures that one; here fewer, as the service
# records one at a time (~0.5-1.5 s each here) and a test's time is the suite's.
BURST = 30
WAIT_SECONDS = 600  # a bound for a loaded machine, never a speed target (those are in bench/)


class PostgreSQL:
    """A private PostgreSQL 15 server on a loopback port, run as the `postgres` user (it refuses
    root) in a folder of its own; each course gets a database of its own."""

    BIN = Path("/usr/lib/postgresql/15/bin")

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="grader-postgres-"))
        user = pwd.getpwnam("postgres")
        os.chown(self.folder, user.pw_uid, user.pw_gid)
        self.port = free_port()
        self._as_postgres("initdb", "-D", "data", "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres("pg_ctl", "-D", "data", "-l", "log", "-w", "-o", options, "start")

    def _as_postgres(self, program: str, *argv: str) -> None:
        command = ["runuser", "-u", "postgres", "--", str(self.BIN / program), *argv]
        subprocess.run(command, cwd=self.folder, check=True, capture_output=True, timeout=120)

    def database(self, name: str) -> str:
        """A new database's URL, as a course's `c.CourseDirectory.db_url` names it."""
        connection = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres")
        connection.autocommit = True  # CREATE DATABASE runs outside any transaction
        try:
            connection.cursor().execute(f'CREATE DATABASE "{name}"')
        finally:
            connection.close()
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        self._as_postgres("pg_ctl", "-D", "data", "-m", "fast", "stop")
        shutil.rmtree(self.folder)


@pytest.fixture(scope="session")
def postgres():
    server = PostgreSQL()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def course(tmp_path_factory, postgres) -> tuple[Path, Path]:
    """A `grader init` course whose gradebook is on PostgreSQL, its exchange, the first
    assignment released; one graded submission per student and day (c.GradeOnSubmit.per_day)."""
    root = tmp_path_factory.mktemp("serve")
    exchange, course = root / "exchange", root / "course"
    exchange.mkdir(mode=0o777)
    assert main(["init", str(course)]) == 0
    settings = {
        "Exchange.root": str(exchange),
        "CourseDirectory.db_url": postgres.database("serve"),
        "GradeOnSubmit.per_day": 1,
    }
    with (course / "nbgrader_config.py").open("a") as config:
        config.writelines(f"c.{name} = {value!r}\n" for name, value in settings.items())
    use_this_environment()  # nbgrader runs `alembic` by name to set the database up
    nbgrader("generate_assignment", ASSIGNMENT, cwd=course, exchange=exchange)
    nbgrader("release_assignment", ASSIGNMENT, cwd=course, exchange=exchange)
    register_all(Course(course))  # what `grader serve` does first, once for the module
    return root, course


class Served:
    """`grader serve --course COURSE [options]` running, its log in a file."""

    def __init__(self, course: Path, *options: str) -> None:
        self.log = course / f"serve-{time.monotonic_ns()}.log"
        command = [sys.executable, "-m", "grader", "serve", "--course", str(course), *options]
        with self.log.open("w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=120) == 0, self.log.read_text()

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *failed) -> None:
        if self.process.poll() is None:  # a failed test's: it must not hold the course
            self.process.kill()
            self.process.wait(timeout=30)

    def lines(self, word: str) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if f" {word} " in line]


def ledger(course: Path) -> dict[str, dict]:
    entries = (json.loads(p.read_text()) for p in (course / "serve" / "done").glob("*.json"))
    return {e["submission"]: e for e in entries}


def wait_for(course: Path, count: int, served: Served) -> dict[str, dict]:
    """The ledger once it holds `count` submissions (the service's log if it never does)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while len(found := ledger(course)) < count:
        assert served.process.poll() is None, served.log.read_text()
        assert time.monotonic() < deadline, served.log.read_text()[-3000:]
        time.sleep(0.5)
    return found


def submit(root: Path, student: str, profile: str = "ada") -> None:
    """`student` submits `profile`'s answers with nbgrader's own submit (its exchange class, in
    this process: a class submits faster than a command each would start)."""
    home = root / student
    notebook_path(home, ASSIGNMENT).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(PROFILES[profile].build(ASSIGNMENT), notebook_path(home, ASSIGNMENT))
    config = Config()
    config.Exchange.root = str(root / "exchange")
    config.Exchange.cache = str(home / ".nbgrader-cache")
    config.Exchange.assignment_dir = str(home)
    config.CourseDirectory.course_id = COURSE_ID
    coursedir = CourseDirectory(config=config)
    coursedir.student_id, coursedir.assignment_id = student, ASSIGNMENT
    authenticator = Authenticator(config=config)
    ExchangeSubmit(coursedir=coursedir, authenticator=authenticator, config=config).start()


def fetch_feedback(root: Path, student: str) -> list[str]:
    """`nbgrader fetch_feedback` as the student: every page fetched, newest submission last."""
    nbgrader(
        "fetch_feedback", ASSIGNMENT, cwd=root / student, exchange=root / "exchange", user=student
    )
    pages = sorted(fetched_feedback(root / student, ASSIGNMENT).glob(f"*/{ASSIGNMENT}.html"))
    return [p.read_text() for p in pages]


def recorded(course: Path) -> dict[str, float]:
    """Each student's score of the assignment, as nbgrader's gradebook holds it."""
    with Gradebook(gradebook_url(Course(course)), COURSE_ID) as gradebook:
        return {s.student_id: s.score for s in gradebook.find_assignment(ASSIGNMENT).submissions}


def test_a_submission_is_graded_and_its_feedback_fetched_with_no_instructor_command(course):
    root, folder = course
    with Served(folder) as served:
        hand_in(root, root / "exchange", "ada", ASSIGNMENT, "ada")  # nbgrader's fetch and submit
        (entry,) = wait_for(folder, 1, served).values()
        (page,) = fetch_feedback(root, "ada")
        served.stop()
    expected = sum(PROFILES["ada"].expected(ASSIGNMENT).values())
    assert entry["outcome"] == "graded" and entry["score"] == expected
    assert f"— {expected:g} of {entry['max_score']:g}" in page and "graded at " in page
    assert recorded(folder) == {"ada": expected}
    assert len(served.lines("graded")) == 1


def test_the_submission_over_the_daily_limit_is_refused_and_the_student_told(course):
    root, folder = course
    with Served(folder) as served:
        submit(root, "ada", profile="ben")  # her second today: refused, her grade kept
        (entry,) = [e for e in wait_for(folder, 2, served).values() if e["outcome"] != "graded"]
        pages = fetch_feedback(root, "ada")
        served.stop()
    assert entry["outcome"] == "refused"
    assert "was not graded" in pages[-1] and "daily limit (1)" in pages[-1]
    assert recorded(folder) == {"ada": sum(PROFILES["ada"].expected(ASSIGNMENT).values())}


def test_a_service_stopped_catches_up_on_what_was_submitted_meanwhile(course, capsys):
    root, folder = course
    submit(root, "ben", profile="ben")  # nothing serves the course now
    with Served(folder) as served:
        wait_for(folder, 3, served)
        served.stop()
    assert main(["status", "--course", str(folder)]) == 0
    said = capsys.readouterr().out
    assert (
        "graded: 2" in said
        and "last graded: ben/" in said
        and "failures (being retried): 0" in said
    )
    assert recorded(folder)["ben"] == sum(PROFILES["ben"].expected(ASSIGNMENT).values())
    assert fetch_feedback(root, "ben")


def test_the_postgresql_gradebook_round_trips_with_autograde_formgrader_and_export(course):
    root, folder = course
    assert not (folder / "gradebook.db").exists()  # all of it on the server
    two = ["--student", "ada", "--student", "ben"]
    done = subprocess.run(
        [sys.executable, "-m", "grader", "autograde", "--course", str(folder), "--force", *two],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    expected = {s: sum(PROFILES[s].expected(ASSIGNMENT).values()) for s in ("ada", "ben")}
    assert recorded(folder) == expected
    # What formgrader's submissions view shows: its handlers ask nbgrader's API.
    api = NbGraderAPI(config=course_settings(folder))
    shown = {s["student"]: s["score"] for s in api.get_submissions(ASSIGNMENT)}
    assert shown == expected
    csv_file = root / "grades.csv"
    assert main(["export", "--course", str(folder), "--csv", str(csv_file)]) == 0
    rows = {row["student_id"]: row for row in csv.DictReader(csv_file.open())}
    assert {s: float(list(rows[s].values())[-1]) for s in expected} == expected  # the total


# --- the queue: Redis and Celery workers -----------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Redis:
    """A private redis-server on a loopback port, keeping nothing on disk."""

    def __init__(self, folder: Path) -> None:
        self.port, self.folder = free_port(), folder
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.start()

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.folder)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not self._answers():
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def restart(self) -> None:
        """Stopped and started again: what it held (the queue, the results) is gone."""
        self.stop()
        self.start()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="session")
def redis(tmp_path_factory):
    server = Redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


def worker(broker: str, course: Path, name: str) -> subprocess.Popen:
    """`celery -A grader.serve.queue worker`, as README starts one, in a session of its own."""
    env = {
        **os.environ,
        "GRADER_BROKER": broker,
        "GRADER_SOURCE": str(Layout.of(course).source),
        "GRADER_VISIBILITY_SECONDS": "15",  # a killed worker's task is back within seconds
    }
    command = [sys.executable, "-m", "celery", "-A", "grader.serve.queue", "worker"]
    command += ["--concurrency", "1", "--loglevel", "WARNING", "-n", f"{name}@%h"]
    log = (course / f"{name}.log").open("w")
    return subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)


def kill(process: subprocess.Popen) -> None:
    """SIGKILL to the worker and its pool: nothing of it acknowledges anything."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def task_in_hand(broker: str, names: list[str]) -> tuple[str, dict]:
    """A worker of `names` running a task now, and that task, as Celery's `inspect active`
    answers (either worker: on a loaded machine one may start late, or not be caught busy)."""
    hosts = {f"{name}@{socket.gethostname()}": name for name in names}
    inspect = Celery(broker=broker).control.inspect(list(hosts), timeout=2)
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for host, tasks in (inspect.active() or {}).items():
            if tasks:
                return hosts[host], tasks[0]
    raise AssertionError(f"no worker of {names} was ever caught running a task")


def wait_until_recorded(course: Path, task: dict, served: Served) -> None:
    """Until the ledger records the submission of `task` (as `inspect active` told it): its
    task was delivered again once its worker was lost, and graded. (Its result in the broker
    says nothing: the service forgets a result once it has read it.)"""
    fingerprint = task["args"][-1]
    deadline = time.monotonic() + WAIT_SECONDS
    while not any(service.task_id(name, fingerprint) == task["id"] for name in ledger(course)):
        assert served.process.poll() is None, served.log.read_text()
        assert time.monotonic() < deadline, f"task {task['id']} was never delivered again"
        time.sleep(0.5)


def status_once_a_worker_answers(folder: Path, capsys, within_s: float = 60) -> str:
    """`grader status`'s output once some worker answers its ping, or the last one after
    `within_s`: status reports who answers a 1 s ping now, and right after a broker restart a
    worker that lived through it can miss one (the full run failed so once, with all 100 graded)."""
    deadline = time.monotonic() + within_s
    while True:
        assert main(["status", "--course", str(folder)]) == 0
        out = capsys.readouterr().out
        if "workers: 0 answering" not in out or time.monotonic() > deadline:
            return out
        time.sleep(1)


def test_a_burst_is_graded_once_each_in_order_through_a_worker_killed_and_a_broker_restart(
    course, redis, capsys
):
    root, folder = course
    before = len(ledger(folder))
    workers = {f"w{i}": worker(redis.url, folder, f"w{i}") for i in (1, 2)}
    students = [f"s{i:03d}" for i in range(BURST)]
    try:
        with Served(folder, "--broker", redis.url) as served:
            for student in students:
                submit(root, student)
            # Caught busy while the burst is queued behind it: waiting for some to be graded first
            # let a loaded run find the queue drained and no worker ever busy again.
            name, killed = task_in_hand(redis.url, list(workers))
            kill(workers.pop(name))  # mid-task: that task is delivered again, to the other
            # before the broker restarts (the service then sends again all it has not heard of)
            wait_until_recorded(folder, killed, served)
            wait_for(folder, before + BURST // 2, served)
            redis.restart()  # the queue and the results it held are lost
            entries = wait_for(folder, before + BURST, served)
            assert "workers: 1 answering on" in status_once_a_worker_answers(folder, capsys)
            served.stop()
    finally:
        for process in workers.values():
            kill(process)
    burst = sorted(
        (e for e in entries.values() if e["student"] in students), key=lambda e: e["order"]
    )
    assert [e["student"] for e in burst] == students  # recorded in order of arrival
    assert {e["outcome"] for e in burst} == {"graded"}
    graded = [line.split()[3].split("/")[0] for line in served.lines("graded")]
    assert sorted(graded) == students  # each recorded once, the killed worker's task too
    expected = sum(PROFILES["ada"].expected(ASSIGNMENT).values())
    assert {recorded(folder)[s] for s in students} == {expected}


def test_before_the_due_date_only_the_visible_checks_are_released_then_the_grade(
    course, monkeypatch
):
    """c.GradeOnSubmit.before_due = "visible": the grade is recorded in full for the instructor,
    the page released before the due date shows the visible checks and no score (nothing of
    the hidden ones); once the due date has passed the service releases the full page by itself.
    The service runs in this process (the one-box setup), on a clock the test moves."""
    root, folder = course
    due = datetime(2030, 1, 1)
    course_ = Course(folder, Layout.of(folder).source)
    with Gradebook(gradebook_url(course_), COURSE_ID) as gradebook:
        gradebook.update_or_create_assignment(ASSIGNMENT, duedate=due)
    clock = [due - timedelta(days=1)]
    monkeypatch.setattr(service, "_utc_now", lambda: clock[0])
    settings = course_settings(folder)
    settings.GradeOnSubmit.before_due = "visible"
    served = service.Service(
        course_, settings, service.InProcess(Grading(course_.source, *sandboxed(course_.source)))
    )
    stop = threading.Event()
    thread = threading.Thread(target=served.run, args=(stop,))
    before = len(ledger(folder))
    submit(root, "vic", profile="ivy")  # a wrong layer_norm: the hidden checks would tell more
    thread.start()
    try:
        waited = time.monotonic()
        while len(ledger(folder)) == before:
            assert thread.is_alive() and time.monotonic() - waited < WAIT_SECONDS
            time.sleep(0.5)
        (early,) = fetch_feedback(root, "vic")
        clock[0] = due + timedelta(seconds=1)
        while any(e.get("visible_only") for e in ledger(folder).values()):
            assert thread.is_alive() and time.monotonic() - waited < WAIT_SECONDS
            time.sleep(0.5)
        late = fetch_feedback(root, "vic")[-1]
    finally:
        stop.set()
        thread.join(timeout=120)
        with Gradebook(gradebook_url(course_), COURSE_ID) as gradebook:
            gradebook.update_or_create_assignment(ASSIGNMENT, duedate=None)
    expected = sum(PROFILES["ivy"].expected(ASSIGNMENT).values())
    assert recorded(folder)["vic"] == expected  # the instructor's gradebook: the whole grade
    assert "your grade is released after the due date" in early
    assert "(hidden)" not in early and "visible checks pass" in early
    shown = html.unescape(re.sub(r"<[^>]+>", "", early))
    assert "Test cell (visible checks only" in shown and "Test cell (Score" not in shown
    assert "(hidden)" in late and f"— {expected:g} of " in late

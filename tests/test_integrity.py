"""The source scan finds a dynamic call however it is reached: called, passed or bound as a value,
or looked up in the builtins."""

from __future__ import annotations

import pytest

from grader.checks import EXERCISES
from normcheck.integrity import forbidden_uses

HEAD = "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n"
# Each computes the library's layer norm from a name no reader of the source sees written out.
HIDDEN = {
    "called": "    return eval('F.layer_' + 'norm')(x, s, w, b, eps)",
    "bound_to_a_name": "    run = eval\n    return run('F.layer_' + 'norm')(x, s, w, b, eps)",
    "passed_to_map": "    return list(map(eval, ['F.layer_' + 'norm']))[0](x, s, w, b, eps)",
    "in_a_tuple": "    return (eval,)[0]('F.layer_' + 'norm')(x, s, w, b, eps)",
    "exec_as_value": "    e = exec\n    e('y = 1')\n    return x",
    "the_builtins_module": (
        "    import builtins\n    return builtins.eval('F.layer_' + 'norm')(x, s, w, b, eps)"
    ),
    "the_builtins_dict": "    return __builtins__['ev' + 'al']('F.layer_norm')(x, s, w, b, eps)",
}


@pytest.mark.parametrize("route", sorted(HIDDEN))
def test_a_dynamic_call_is_found_however_it_is_reached(route):
    assert forbidden_uses(HEAD + HIDDEN[route], EXERCISES["layer_norm"]) != []


def test_an_answer_that_builds_its_own_is_not_suspected():
    own = HEAD + "    mean = x.mean(-1, keepdim=True)\n    return (x - mean) / (x.var(-1) + eps)"
    assert forbidden_uses(own, EXERCISES["layer_norm"]) == []


def test_a_method_named_like_a_builtin_is_not_suspected():
    own = HEAD + "    model = torch.nn.Identity()\n    model.eval()\n    return model.eval()(x)"
    assert forbidden_uses(own, EXERCISES["layer_norm"]) == []

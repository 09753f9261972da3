"""A benchmark's command line is the ``Options:`` section of its docstring (bench/common.py's
`options`): lists, paths, switches and defaults parse as declared, a bad value is refused, and
every benchmark's own section parses."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from grader.course.config import REPO

BENCH = REPO / "bench"

DOC = """A benchmark with one option of each kind.

Options:
    --sizes (int, one or more): class sizes. Default: 16 200
    --stock-sizes (int, zero or more): class sizes stock grades, an entry continued on the
        next line (none: ours only). Default: 16
    --max-load (float): skip above this load. Default: 1.5
    --keep (path): keep what it writes here.
    --skip-stock: skip stock nbgrader.
"""


def _bench_common():
    spec = importlib.util.spec_from_file_location("bench_common", BENCH / "common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


options = _bench_common().options


def test_declared_defaults() -> None:
    args = options(DOC, [])
    assert vars(args) == {
        "sizes": [16, 200],
        "stock_sizes": [16],
        "max_load": 1.5,
        "keep": None,
        "skip_stock": False,
    }


def test_given_values_lists_paths_and_switches() -> None:
    argv = ["--sizes", "1", "2", "3", "--stock-sizes", "--keep", "out", "--skip-stock"]
    args = options(DOC, [*argv, "--max-load", "3"])
    assert args.sizes == [1, 2, 3]
    assert args.stock_sizes == []
    assert args.keep == Path("out")
    assert args.skip_stock is True
    assert args.max_load == 3.0


@pytest.mark.parametrize(
    "argv", [["--sizes", "many"], ["--max-load", "high"], ["--sizes"], ["--runs", "3"]]
)
def test_a_bad_value_or_flag_is_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        options(DOC, argv)
    assert refused.value.code == 2
    assert argv[0] in capsys.readouterr().err


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("--runs (integer): runs. Default: 3", "--runs: type 'integer'"),
        ("--runs (int) runs", "not '--runs"),
        ("--top (int): cells. Default: 8\n    runs (int): runs.", "'runs (int): runs.' is neither"),
    ],
)
def test_a_malformed_declaration_is_refused(entry: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        options(f"A benchmark.\n\nOptions:\n    {entry}\n", [])


# common.py and mutation.py (which makes bench/mutants.py's mutants) are the benchmarks' modules.
LIBRARIES = {"common", "mutation"}


@pytest.mark.parametrize(
    "script", sorted(p.name for p in BENCH.glob("*.py") if p.stem not in LIBRARIES)
)
def test_each_benchmark_declares_options_that_parse(script: str) -> None:
    doc = ast.get_docstring(ast.parse((BENCH / script).read_text()), clean=False)
    assert vars(options(doc or "", [])), f"bench/{script}'s docstring declares no option"

"""Every ``>>>`` example in the package's docstrings runs, and a broken one fails the suite.

Each module of ``onnx_struct`` is imported and its docstrings' examples run with :mod:`doctest`
(one test per module that has examples). An example builds what it needs in memory; none reads
a file it did not write.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import onnx_struct

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules() -> list[str]:
    names = [onnx_struct.__name__]
    for info in pkgutil.walk_packages(onnx_struct.__path__, prefix="onnx_struct."):
        if "._proto" not in info.name and info.name != "onnx_struct.__main__":
            names.append(info.name)
    return sorted(names)


def _examples(module_name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, module_name)
    return [t for t in tests if t.examples]


MODULES_WITH_EXAMPLES = [name for name in _modules() if _examples(name)]


def _run(test: doctest.DocTest) -> doctest.TestResults:
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    failures: list[str] = []
    runner.run(test, out=failures.append)
    assert not runner.failures, "".join(failures)
    return runner.summarize(verbose=False)


def test_examples_are_found() -> None:
    # The package documents its main calls by example; none found means the finder broke.
    assert len(MODULES_WITH_EXAMPLES) >= 5


def test_a_broken_example_fails() -> None:
    broken = doctest.DocTestParser().get_doctest(">>> 1 + 1\n3\n", {}, "broken", "broken.py", 0)
    with pytest.raises(AssertionError, match="Expected"):
        _run(broken)


@pytest.mark.parametrize("module_name", MODULES_WITH_EXAMPLES)
def test_docstring_examples(module_name: str) -> None:
    for test in _examples(module_name):
        _run(test)

"""Pytest fixtures and hooks only; shared helpers live in tests/support/.

``base_model``, ``linear_int4_128`` and ``model_with`` are re-exported from support.models for
compatibility only (``from conftest import model_with``); new tests import from support.
"""

from __future__ import annotations

import onnx
import pytest
from support.models import base_model, linear_int4_128, model_with
from support.tiers import no_child_processes

__all__ = ["as_form", "base_model", "linear_int4_128", "model_with"]


@pytest.fixture(params=["proto", "bytes", "path"])
def as_form(request, tmp_path):
    """Turn an onnx.ModelProto into the form under test (the path form writes it to tmp_path)."""

    def convert(model: onnx.ModelProto):
        if request.param == "proto":
            return model
        if request.param == "bytes":
            return model.SerializeToString()
        path = tmp_path / "model.onnx"
        onnx.save(model, path)
        return str(path)

    convert.form = request.param
    return convert


# The fast tier stays in-process (tests/support/tiers.py): every phase of an unmarked test runs with
# process creation refused, so a test that spawns a child fails until it is marked slow.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _in_tier(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _in_tier(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _in_tier(item))


def _in_tier(item):
    if item.get_closest_marker("slow"):
        return (yield)
    with no_child_processes(item.nodeid):
        return (yield)

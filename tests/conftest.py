"""Pytest fixtures and hooks only; shared helpers live in tests/support/.

``base_model``, ``linear_int4_128`` and ``model_with`` are re-exported from support.models for
compatibility only (``from conftest import model_with``); new tests import from support.
"""

from __future__ import annotations

import onnx
import pytest
from support.models import base_model, linear_int4_128, model_with

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

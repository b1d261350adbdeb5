"""InferenceSession's refusals of a model file are also onnxruntime's classes for the same file.

The oracle is onnxruntime itself: each file is given to ``onnxruntime.InferenceSession`` first,
and whatever class it raises must catch ours too (besides ValidationError and the dual class of
docs/errors.md), so that ``except NoSuchFile`` written against onnxruntime keeps working.
"""

from __future__ import annotations

import pickle

import onnxruntime as ort
import pytest

import onnx_struct as S
from onnx_struct.errors import ModelFileNotFoundError, ModelValueError, NotRegularFileError


def _missing(tmp_path):
    return tmp_path / "missing.onnx"


def _unparsable(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"garbage\x00\xff")
    return path


def _empty(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    return path


def _directory(tmp_path):
    path = tmp_path / "d.onnx"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("make", "ours"),
    [
        (_missing, ModelFileNotFoundError),
        (_unparsable, ModelValueError),
        (_empty, S.ValidationError),
        (_directory, NotRegularFileError),
    ],
)
def test_a_refused_model_file_is_also_onnxruntimes_class(tmp_path, make, ours):
    path = make(tmp_path)
    with pytest.raises(Exception) as stock:  # noqa: PT011 - the class is what is learned here
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    stock_class = type(stock.value)
    assert stock_class.__module__.startswith("onnxruntime")
    with pytest.raises(stock_class) as caught:
        S.InferenceSession(str(path))
    error = caught.value
    assert isinstance(error, ours) and isinstance(error, S.ValidationError)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert (again.path, again.reason, again.code) == (error.path, error.reason, error.code)

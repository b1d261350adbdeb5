"""install()/uninstall(): onnx's own entry points become struct-aware, and are restored exactly."""

from __future__ import annotations

import subprocess
import sys

import onnx
import onnx.checker
import onnx.shape_inference
import pytest
from support.models import base_model, linear_int4_128, model_with

import onnx_struct as S


@pytest.fixture
def installed():
    S.install()
    yield
    S.uninstall()


def bad_model():
    return model_with([linear_int4_128()], [S.make_struct_value("weight", 0, raw_data=bytes(63))])


@pytest.mark.slow
def test_import_changes_nothing():
    code = (
        "import onnx.checker, onnx.shape_inference; a = onnx.checker.check_model; b = onnx.shape_inference.infer_shapes;"
        "import onnx_struct; assert onnx.checker.check_model is a and onnx.shape_inference.infer_shapes is b"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_stock_checker_does_not_see_struct_rules_without_install():
    onnx.checker.check_model(base_model())
    onnx.checker.check_model(bad_model())  # stock onnx: struct parts are unknown fields, ignored


def test_install_makes_check_model_struct_aware_and_uninstall_restores(tmp_path):
    original_check, original_infer = onnx.checker.check_model, onnx.shape_inference.infer_shapes
    S.install()
    try:
        assert onnx.checker.check_model is not original_check
        with pytest.raises(onnx.checker.ValidationError, match="payload is 63 bytes"):
            onnx.checker.check_model(bad_model())
        path = tmp_path / "bad.onnx"
        onnx.save(bad_model(), path)
        with pytest.raises(S.ValidationError):
            onnx.checker.check_model(str(path))
        onnx.checker.check_model(base_model())  # plain models go to the original checker
        S.install()  # idempotent
    finally:
        S.uninstall()
    assert onnx.checker.check_model is original_check
    assert onnx.shape_inference.infer_shapes is original_infer
    S.uninstall()  # harmless twice
    assert onnx.checker.check_model is original_check


def test_installed_hook_passes_onnx_checker_flags_through():
    # An op of an unregistered custom domain passes onnx's checker unless check_custom_domain is set;
    # the struct-aware path must honour the flag exactly as the stock path does.
    model = model_with([linear_int4_128()], [S.make_struct_value("weight", 0, raw_data=bytes(64))])
    model.graph.node.append(onnx.helper.make_node("Custom", ["X"], ["Z"], domain="my.domain"))
    model.opset_import.append(onnx.helper.make_opsetid("my.domain", 1))
    S.check_model(model)
    with pytest.raises(S.ValidationError, match="No Op registered for Custom"):
        S.check_model(model, check_custom_domain=True)
    S.install()
    try:
        onnx.checker.check_model(model)
        with pytest.raises(onnx.checker.ValidationError, match="No Op registered for Custom"):
            onnx.checker.check_model(model, check_custom_domain=True)
    finally:
        S.uninstall()


def test_installed_infer_shapes_passes_onnx_arguments_through():
    # strict_mode must reach onnx's inference on the struct path as on the stock path: a declared
    # output type contradicting the inferred one is only an error in strict mode.
    from onnx import TensorProto

    model = model_with([linear_int4_128()], [S.make_struct_value("weight", 0, raw_data=bytes(64))])
    model.graph.node.append(onnx.helper.make_node("Add", ["X", "X"], ["Y2"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("Y2", TensorProto.INT64, [1]))
    S.install()
    try:
        onnx.shape_inference.infer_shapes(model)
        with pytest.raises((onnx.shape_inference.InferenceError, S.ValidationError)):
            onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    finally:
        S.uninstall()

"""install()/uninstall(): onnx's own entry points become struct-aware, and are restored exactly."""

from __future__ import annotations

import ast
import pathlib
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


# ---------------------------------------------------------------------- one capture
def test_the_originals_are_onnxs_and_install_leaves_them():
    from onnx_struct import originals

    S.install()
    try:
        assert onnx.checker.check_model is not originals.check_model
        assert originals.check_model.__module__ == "onnx.checker"
        assert originals.infer_shapes.__module__ == "onnx.shape_inference"
        assert onnx.checker.check_model.__wrapped__ is originals.check_model  # functools.wraps
        assert onnx.shape_inference.infer_shapes.__wrapped__ is originals.infer_shapes
    finally:
        S.uninstall()
    assert onnx.checker.check_model is originals.check_model


def entry_point_reads(source: str) -> list[int]:
    """Lines that name onnx's check_model or infer_shapes through its module (``onnx.checker.
    check_model``, ``checker.check_model``, ``shape_inference.infer_shapes``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("check_model", "infer_shapes"):
            owner = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
            if owner in ("checker", "shape_inference"):
                lines.append(node.lineno)
    return lines


def test_only_originals_touches_onnxs_entry_points():
    """onnx's functions are captured in one module (onnx_struct/originals.py): any other module
    naming them through onnx's modules gets, after install(), the struct-aware wrapper instead."""
    package = pathlib.Path(S.__file__).parent
    found = [
        f"{path.relative_to(package.parent)}:{line}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "originals.py"
        for line in entry_point_reads(path.read_text())
    ]
    assert not found, "onnx's entry points named outside onnx_struct/originals.py:\n" + "\n".join(found)
    assert entry_point_reads((package / "originals.py").read_text())
    assert entry_point_reads("import onnx\nf = onnx.checker.check_model\nfrom onnx import shape_inference\n"
                             "g = shape_inference.infer_shapes\nself.check_model(m)\n") == [2, 4]  # fmt: skip

"""The public API is pinned: other code depends on these names."""

from __future__ import annotations

import onnx
import onnx.checker

import onnx_struct as S

REQUIRED = {
    "StructTypeProto",
    "StructProto",
    "ValidationError",
    "check_model",
    "validate",
    "size_in_bits",
    "install",
    "uninstall",
    "make_array",
    "make_structure",
    "make_field",
    "make_constant_field",
    "make_bit_packing",
    "make_component",
    "make_type_reference",
    "make_struct_value",
    "make_struct_type_proto",
    "make_struct_value_info",
    "add_struct_types",
    "add_struct_values",
    "add_value_infos",
    "get_struct_types",
    "get_struct_values",
}


def test_required_names_are_exported():
    assert REQUIRED <= set(S.__all__)
    for name in S.__all__:
        assert hasattr(S, name), name


def test_formats_api():
    from onnx_struct import formats
    from onnx_struct.formats import gguf

    assert callable(formats.get) and callable(formats.names) and callable(formats.quantize)
    assert callable(gguf.convert)
    assert formats.get("Q4_0").name == "Q4_0"


def test_console_script_is_declared():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["onnx-struct"] == "onnx_struct.cli:main"


def test_load_model_once_for_many_calls(tmp_path):
    import numpy as np
    from conftest import model_with
    from onnx import TensorProto
    from onnx import helper as oh

    decoder = oh.make_function(
        "t", "dec", ["v"], ["y"], [oh.make_node("Cast", ["v"], ["y"], to=TensorProto.FLOAT)], [oh.make_opsetid("", 21)]
    )
    declaration = S.make_array(TensorProto.UINT8, 4, decoder=decoder)
    values = [S.make_struct_value(f"w{i}", 0, raw_data=bytes([i, 2 * i, 3 * i, 4 * i])) for i in range(3)]
    path = tmp_path / "m.onnx"
    onnx.save(model_with([declaration], values), path)
    loaded = S.load_model(path)
    assert loaded.base_dir == tmp_path.resolve()
    S.check_model(loaded)
    for i in range(3):
        np.testing.assert_array_equal(S.decode(f"w{i}", loaded), np.array([i, 2 * i, 3 * i, 4 * i], np.float32))
        assert S.view(f"w{i}", loaded)[""].tolist() == [i, 2 * i, 3 * i, 4 * i]


def test_validation_error_is_onnx_validation_error():
    assert issubclass(S.ValidationError, onnx.checker.ValidationError)
    assert issubclass(S.LeafNotFoundError, KeyError) and issubclass(S.LeafNotFoundError, S.ValidationError)


def test_messages_are_the_generated_classes():
    assert S.StructTypeProto.DESCRIPTOR.full_name == "onnx_struct.StructTypeProto"
    assert S.StructProto.DESCRIPTOR.full_name == "onnx_struct.StructProto"

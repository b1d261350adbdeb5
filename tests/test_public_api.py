"""The public API is pinned: other code depends on these names."""

from __future__ import annotations

import onnx
import onnx.checker
import pytest

import onnx_struct as S

# Every name of the public facade, exactly: adding or removing one is an API change and must
# show up here (and in README.md).
PUBLIC = {
    "StructTypeProto", "StructProto", "ValidationError", "LeafNotFoundError",
    "check_model", "validate", "size_in_bits", "install", "uninstall",
    "decode", "encode", "lower", "infer_shapes", "InferenceSession", "generate", "load_tokenizer", "quantize",
    "apply_chat_template",
    "make_array", "make_bit_packing", "make_component", "make_constant_field", "make_field",
    "make_map_type_proto", "make_optional_type_proto", "make_sequence_type_proto", "make_struct_type_proto",
    "make_struct_value", "make_struct_value_info", "make_structure", "make_tensor_type", "make_type_reference",
    "make_value_info",
    "view", "view_buffer", "StructView", "pack", "make_struct_value_from_leaves",
    "save_with_external_data", "load_with_external_data",
    "add_struct_types", "add_struct_values", "add_value_infos", "get_struct_types", "get_struct_values",
    "set_struct_types", "set_struct_values",
    "LoadedModel", "load_model", "from_onnx", "to_onnx",
}  # fmt: skip
# FormatSpec / register_formats: the one registration style (a table row per format);
# format_of_decoder: which registered format a decoder FunctionProto is (by its exact identity).
FORMATS_PUBLIC = {
    "BlockFormat",
    "FORMAT_DOMAIN",
    "FormatSpec",
    "format_of_decoder",
    "get",
    "names",
    "register",
    "register_formats",
}
SUBCOMMANDS = [
    "check",
    "inspect",
    "from-gguf",
    "to-gguf",
    "quantize",
    "lower",
    "decode",
    "generate",
    "tokenize",
    "chat",
    "conformance",
    "export",
]


def test_public_names_are_exactly_the_pinned_ones():
    assert len(S.__all__) == len(set(S.__all__)), "duplicate names in __all__"
    assert set(S.__all__) == PUBLIC
    for name in S.__all__:
        assert hasattr(S, name), name


def test_every_public_name_is_a_lazy_one_or_imported_with_the_package():
    # The facade imports a name's module on first use (its TYPE_CHECKING block lists them): a
    # name in __all__ that is in neither would be an AttributeError only when someone uses it.
    eager = {"ValidationError", "LeafNotFoundError"}
    assert set(S._lazy_names()) | eager == set(S.__all__)
    assert set(S.__all__) <= set(dir(S))
    with pytest.raises(AttributeError, match="no attribute 'check_modle'"):
        S.check_modle  # noqa: B018


def test_formats_names_are_exactly_the_pinned_ones():
    from onnx_struct import formats

    assert len(formats.__all__) == len(set(formats.__all__))
    assert set(formats.__all__) == FORMATS_PUBLIC
    for name in formats.__all__:
        assert getattr(formats, name) is not None, name


@pytest.mark.slow
def test_cli_subcommands_are_exactly_the_pinned_ones():
    """``python -m onnx_struct --help`` lists the subcommands, in this order."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)  # this checkout, not an installed copy
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "onnx_struct", "--help"], capture_output=True, text=True, env=env, check=True
    )
    listed = result.stdout.split("positional arguments:")[1].split("options:")[0]
    # argparse indents each subcommand by four spaces; wrapped help lines are indented further
    assert re.findall(r"^    (\S+)", listed, flags=re.M) == SUBCOMMANDS


def test_formats_api():
    from onnx_struct import convert as gguf_files
    from onnx_struct import formats
    from onnx_struct.formats import gguf

    assert callable(formats.get) and callable(formats.names)
    assert gguf.__all__ == ["decode_metadata"]
    assert gguf_files.__all__ == ["convert", "decode_metadata"]
    assert callable(gguf_files.convert) and gguf.decode_metadata is gguf_files.decode_metadata
    assert formats.get("Q4_0").name == "Q4_0"


def test_moved_spellings_warn_and_are_the_new_objects():
    """formats.quantize and formats.gguf.convert still work, with a DeprecationWarning that names
    the new spelling and points at the line that used the old one."""
    from onnx_struct import convert as gguf_files
    from onnx_struct import formats
    from onnx_struct.passes.quantize import quantize

    assert S.quantize is quantize
    with pytest.warns(
        DeprecationWarning, match=r"^onnx_struct\.formats\.quantize is deprecated; use onnx_struct\.quantize$"
    ) as record:
        assert formats.quantize is quantize
    assert [w.filename for w in record] == [__file__]
    with pytest.warns(
        DeprecationWarning,
        match=r"^onnx_struct\.formats\.gguf\.convert is deprecated; use onnx_struct\.convert\.convert$",
    ):
        from onnx_struct.formats.gguf import convert
    assert convert is gguf_files.convert


def test_current_spellings_do_not_warn():
    import warnings

    from onnx_struct import formats
    from onnx_struct.formats import gguf

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        namespace: dict = {}
        exec("from onnx_struct.formats import *", namespace)
        assert "quantize" not in namespace and "get" in namespace
        assert callable(formats.get) and callable(gguf.decode_metadata) and callable(S.quantize)
        with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
            formats.nothing  # noqa: B018 - the lookup is the test
        with pytest.raises(AttributeError, match="has no attribute 'quantize'"):
            gguf.quantize  # noqa: B018


def test_console_script_is_declared():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["onnx-struct"] == "onnx_struct.cli:main"


def test_load_model_once_for_many_calls(tmp_path):
    import numpy as np
    from onnx import TensorProto
    from onnx import helper as oh
    from support.models import model_with

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

"""to_gguf / ``onnx-struct to-gguf``: struct weights back to a GGUF file.

Oracles: the GGUF file gguf-py's GGUFWriter wrote (read back with gguf.GGUFReader: every tensor's
type, shape and bytes, every metadata key, type and value), and gguf-py's own quantizer
(``gguf.quants.quantize``) for weights quantize produced; never onnx_struct's output.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import onnx_struct as S
from onnx_struct import formats
from onnx_struct.cli import main
from onnx_struct.convert.to_gguf import _raw_gguf_type, plan_gguf, to_gguf
from onnx_struct.passes.quantize import quantize

gguf = pytest.importorskip("gguf")
from gguf import quants as gq  # noqa: E402
from support.llm import TinyLlama, spm_vocab, write_gguf  # noqa: E402

from onnx_struct.convert import convert  # noqa: E402
from onnx_struct.formats.gguf.metadata import VALUE_TYPES_KEY  # noqa: E402

Q = gguf.GGMLQuantizationType
MIXED = {"ffn_down": "Q6_K", "attn_v": "Q8_0", "attn_k": "Q4_K", "token_embd": "F32"}


def assert_same_gguf(expected: pathlib.Path, actual: pathlib.Path) -> None:
    """Every tensor (name, type, shape, bytes, in order) and metadata entry (key, types, value)."""
    a, b = gguf.GGUFReader(str(expected)), gguf.GGUFReader(str(actual))
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    for x, y in zip(a.tensors, b.tensors, strict=True):
        assert x.tensor_type == y.tensor_type, x.name
        assert x.shape.tolist() == y.shape.tolist(), x.name
        assert bytes(x.data) == bytes(y.data), x.name
    keys = [k for k in a.fields if not k.startswith("GGUF.")]
    assert keys == [k for k in b.fields if not k.startswith("GGUF.")]
    for key in keys:
        assert a.fields[key].types == b.fields[key].types, key
        assert a.fields[key].contents() == b.fields[key].contents(), key


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("to_gguf") / "tiny.gguf"
    write_gguf(path, TinyLlama(**spm_vocab(), default_type="Q4_0", types=MIXED, seed=5))
    return path


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("reference", [False, True])
def test_from_gguf_then_to_gguf_gives_the_source_tensors_and_metadata(tiny_gguf, tmp_path, graph, reference):
    source = tmp_path / "tiny.gguf"
    source.write_bytes(tiny_gguf.read_bytes())
    onnx.save(convert(source, graph=graph, reference=reference), tmp_path / "tiny.onnx")
    export = to_gguf(tmp_path / "tiny.onnx", tmp_path / "back.gguf")
    assert (export.source, export.names, export.architecture, export.skipped) == ("gguf", "recorded", "llama", [])
    assert_same_gguf(source, tmp_path / "back.gguf")


def test_a_kept_unknown_type_is_written_back_as_its_recorded_type(tiny_gguf, tmp_path, monkeypatch):
    real_get = formats.get

    def get(name):  # the package pretends not to know Q8_0: from-gguf keeps it as raw bytes
        if name == "Q8_0":
            raise KeyError(name)
        return real_get(name)

    monkeypatch.setattr(formats, "get", get)
    model = convert(tiny_gguf, keep_unknown=True)
    monkeypatch.undo()
    raw = [v for v in S.get_struct_values(model) if not S.get_struct_types(model)[v.type].HasField("decoder")]
    assert raw  # the attn_v tensors
    to_gguf(model, tmp_path / "back.gguf")
    assert_same_gguf(tiny_gguf, tmp_path / "back.gguf")


def test_a_recorded_gguf_shape_nested_past_jsons_recursion_is_no_shape():
    entries = [onnx.StringStringEntryProto(key="gguf.type", value="Q8_0")]
    entries.append(onnx.StringStringEntryProto(key="gguf.shape", value="[" * 100_000))  # json: RecursionError
    reason = _raw_gguf_type(types.SimpleNamespace(metadata_props=entries), gguf)
    assert reason == "its recorded gguf.shape is not a JSON list"


# ------------------------------------------------------------------------ quantized models


def mlp(names: dict[str, tuple[int, int]], gather: str | None = None) -> onnx.ModelProto:
    """x[1, K] through MatMuls with the given weights (name -> [K, N]); optionally an embedding
    table read by Gather first. Weights ~ N(0, 0.2)."""
    rng = np.random.default_rng(3)
    nodes, inits, inputs = [], [], []
    x = "x"
    if gather:
        vocab, width = 64, next(iter(names.values()))[0]
        inits.append(numpy_helper.from_array((rng.standard_normal((vocab, width)) * 0.2).astype(np.float32), gather))
        nodes.append(oh.make_node("Gather", [gather, "ids"], ["emb"], axis=0))
        inputs.append(oh.make_tensor_value_info("ids", TensorProto.INT64, [1]))
        x = "emb"
    else:
        inputs.append(oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, next(iter(names.values()))[0]]))
    for i, (name, shape) in enumerate(names.items()):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name))
        nodes.append(oh.make_node("MatMul", [x, name], [f"h{i}"], name=f"mm{i}"))
        x = f"h{i}"
    out = oh.make_tensor_value_info(x, TensorProto.FLOAT, [1, list(names.values())[-1][1]])
    graph = oh.make_graph(nodes, "mlp", inputs, [out], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])


LLAMA_NAMES = {"model.layers.0.mlp.up_proj.weight": (64, 96), "model.layers.0.mlp.down_proj.weight": (96, 64)}


@pytest.mark.parametrize("format_name", ["Q8_0", "Q4_0"])
def test_a_quantized_llama_named_model_gets_llamas_gguf_names_and_gguf_pys_bytes(tmp_path, format_name):
    model = mlp(LLAMA_NAMES, gather="model.embed_tokens.weight")
    floats = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    quantized = quantize(model, format_name, min_elements=0, op_types=("MatMul", "Gather"))
    export = to_gguf(quantized, tmp_path / "q.gguf")
    assert (export.source, export.names, export.architecture, export.skipped) == ("onnx", "llama", "llama", [])
    reader = gguf.GGUFReader(str(tmp_path / "q.gguf"))
    assert [k for k in reader.fields if not k.startswith("GGUF.")] == ["general.architecture"]
    assert reader.fields["general.architecture"].contents() == "llama"
    qtype = Q[format_name]
    expected = {  # llama.cpp's layout: [out, in] rows (ne0 = in), the embedding table as [vocab, width]
        "token_embd.weight": floats["model.embed_tokens.weight"],
        "blk.0.ffn_up.weight": floats["model.layers.0.mlp.up_proj.weight"].T,
        "blk.0.ffn_down.weight": floats["model.layers.0.mlp.down_proj.weight"].T,
    }
    tensors = {t.name: t for t in reader.tensors}
    assert sorted(tensors) == sorted(expected)
    for name, array in expected.items():
        tensor = tensors[name]
        assert tensor.tensor_type == qtype
        assert tensor.shape.tolist() == list(reversed(array.shape))  # GGUF lists ne0 (the row) first
        assert bytes(tensor.data) == gq.quantize(np.ascontiguousarray(array), qtype).tobytes(), name


def test_names_that_are_not_llamas_are_kept_and_no_architecture_is_claimed(tmp_path):
    quantized = quantize(mlp({"w1": (64, 96), "model.layers.0.mlp.up_proj.weight": (96, 64)}), "Q8_0", min_elements=0)
    export = to_gguf(quantized, tmp_path / "q.gguf")
    assert (export.names, export.architecture) == ("kept", None)
    reader = gguf.GGUFReader(str(tmp_path / "q.gguf"))
    assert [t.name for t in reader.tensors] == ["w1", "model.layers.0.mlp.up_proj.weight"]
    assert not [k for k in reader.fields if not k.startswith("GGUF.")]


def test_a_name_ggml_cannot_read_is_skipped_with_the_reason(tmp_path):
    """ggml's gguf reader refuses a file holding a tensor name of GGML_MAX_NAME (64) bytes or more."""
    longest, too_long = "w" * 63, "é" * 32  # 63 bytes; 64 bytes in UTF-8
    quantized = quantize(mlp({longest: (64, 96), too_long: (96, 64)}), "Q8_0", min_elements=0)
    export = to_gguf(quantized, tmp_path / "q.gguf")
    assert [t.name for t in gguf.GGUFReader(str(tmp_path / "q.gguf")).tensors] == [longest]
    ((value, reason),) = export.skipped
    assert value.startswith(too_long) and reason == f"its GGUF name {too_long!r} is past ggml's 63 bytes"


def test_a_layer_index_of_thousands_of_digits_is_no_llama_layer():
    name = f"model.layers.{'9' * 5000}.mlp.up_proj.weight"  # int() of it raised ValueError
    export = plan_gguf(quantize(mlp({"w1": (64, 96), name: (96, 64)}), "Q8_0", min_elements=0))
    assert (export.names, [t.name for t in export.tensors]) == ("kept", ["w1"])
    assert [reason for _, reason in export.skipped] == [f"its GGUF name {name!r} is past ggml's 63 bytes"]


def test_weights_that_cannot_be_gguf_tensors_are_skipped_with_the_reason():
    # w1's input axis 40 is padded to 64; w2 is fine; with --group-axis output every block runs along N
    quantized = quantize(mlp({"w1": (40, 64), "w2": (64, 96)}), "Q8_0", min_elements=0)
    export = plan_gguf(quantized)
    assert [t.name for t in export.tensors] == ["w2"]
    ((name, reason),) = export.skipped
    assert name.startswith("w1") and reason.startswith("padded past its last axis")

    by_output = quantize(mlp({"w1": (64, 96), "w2": (96, 64)}), "Q8_0", min_elements=0, group_axis="output")
    with pytest.raises(
        S.ValidationError, match=r"^graph\.struct_initializer: no struct value can be a GGUF tensor"
    ) as info:
        plan_gguf(by_output)
    assert "'w1': its blocks run along the output axis of the MatMul graph.node[" in str(info.value)
    assert "('mm0')" in str(info.value)


def test_a_format_outside_gguf_is_refused_naming_the_value_and_format():
    quantized = quantize(mlp({"w1": (64, 96)}), "OCP_MXFP8_E4M3", min_elements=0)
    with pytest.raises(S.ValidationError, match=r"'w1_T': format OCP_MXFP8_E4M3 is not a GGUF tensor type"):
        plan_gguf(quantized)


def test_recorded_metadata_that_does_not_fit_its_type_is_refused_naming_the_key(tiny_gguf):
    model = convert(tiny_gguf)
    entry = next(p for p in model.metadata_props if p.key == "llama.block_count")
    entry.value = "4294967296"  # past UINT32
    with pytest.raises(S.ValidationError, match=r"^metadata_props\['llama.block_count'\]: .*UINT32"):
        plan_gguf(model)


def recorded(model: onnx.ModelProto, key: str, value: str, label: str) -> onnx.ModelProto:
    """``model`` with the GGUF entry ``key`` recorded as from-gguf records one: value and type."""
    model.metadata_props.add(key=key, value=value)
    types = next(p for p in model.metadata_props if p.key == VALUE_TYPES_KEY)
    types.value = types.value[:-1] + f",{json.dumps(key)}:{json.dumps(label)}}}"
    return model


@pytest.mark.parametrize(
    ("key", "value", "label", "message"),
    [
        ("tiny.f", "1e300", "FLOAT32", "does not fit the recorded GGUF type FLOAT32"),  # struct.pack: OverflowError
        ("tiny.f", "[1.0, -1e39]", "ARRAY[FLOAT32]", "does not fit the recorded GGUF type FLOAT32"),
        ("GGUF.version", "3", "UINT32", "reserved"),  # gguf-py's reader could not read the file back
        ("onnx_struct.tiny", "3", "STRING", "reserved"),  # nor could from-gguf
        ("general.alignment", str(2**31), "UINT32", "past 65536"),  # gguf-py pads with a list of 2^31 zeros
    ],
)
def test_recorded_metadata_the_writer_cannot_write_is_refused_naming_the_key(tiny_gguf, key, value, label, message):
    with pytest.raises(S.ValidationError, match=rf"^metadata_props\[{re.escape(repr(key))}\]: .*{message}"):
        plan_gguf(recorded(convert(tiny_gguf), key, value, label))


def test_the_largest_recorded_alignment_and_float32_are_written(tiny_gguf, tmp_path):
    model = recorded(convert(tiny_gguf), "general.alignment", str(2**16), "UINT32")
    largest = float(np.finfo(np.float32).max)
    to_gguf(recorded(model, "tiny.f", repr(largest), "FLOAT32"), tmp_path / "back.gguf")
    reader = gguf.GGUFReader(str(tmp_path / "back.gguf"))
    assert reader.fields["general.alignment"].contents() == 2**16
    assert reader.fields["tiny.f"].contents() == largest
    assert {t.data_offset % 2**16 for t in reader.tensors} == {0}


def test_an_empty_recorded_array_is_skipped_with_the_reason(tiny_gguf, tmp_path):
    model = convert(tiny_gguf)
    model.metadata_props.add(key="tiny.empty", value="[]")
    types = next(p for p in model.metadata_props if p.key == VALUE_TYPES_KEY)
    types.value = types.value[:-1] + ',"tiny.empty":"ARRAY[INT32]"}'
    export = to_gguf(model, tmp_path / "back.gguf")
    assert ("tiny.empty", "an empty array: gguf-py's writer cannot write one") in export.skipped
    assert_same_gguf(tiny_gguf, tmp_path / "back.gguf")


def test_a_model_without_struct_values_is_refused():
    with pytest.raises(S.ValidationError, match="the model has no struct values"):
        plan_gguf(mlp({"w1": (64, 96)}))


# ------------------------------------------------------------------------------------- CLI


def test_cli_to_gguf_writes_and_says_which_names(tiny_gguf, tmp_path, capsys):
    onnx.save(convert(tiny_gguf), tmp_path / "tiny.onnx")
    assert main(["to-gguf", str(tmp_path / "tiny.onnx"), str(tmp_path / "back.gguf")]) == 0
    err = capsys.readouterr().err
    assert "the names recorded from the GGUF file" in err and err.count("\n") == 1
    assert_same_gguf(tiny_gguf, tmp_path / "back.gguf")

    quantized = quantize(mlp({"w1": (40, 64), "model.layers.0.mlp.up_proj.weight": (64, 96)}), "Q8_0", min_elements=0)
    onnx.save(quantized, tmp_path / "q.onnx")
    assert main(["to-gguf", str(tmp_path / "q.onnx"), str(tmp_path / "q.gguf"), "--quiet"]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("onnx-struct to-gguf: skipped 'w1_T_padded': padded past its last axis")


def test_cli_to_gguf_exit_codes(tmp_path, capsys, monkeypatch):
    onnx.save(quantize(mlp({"w1": (64, 96)}), "OCP_MXFP8_E4M3", min_elements=0), tmp_path / "mx.onnx")
    assert main(["to-gguf", str(tmp_path / "mx.onnx"), str(tmp_path / "mx.gguf")]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"onnx-struct to-gguf: {tmp_path / 'mx.onnx'}: graph.struct_initializer: no struct value")
    assert not (tmp_path / "mx.gguf").exists()

    assert main(["to-gguf", str(tmp_path / "missing.onnx"), str(tmp_path / "x.gguf")]) == 2
    assert main(["to-gguf", str(tmp_path / "mx.onnx"), str(tmp_path / "mx.onnx")]) == 2
    assert "is the input file" in capsys.readouterr().err

    monkeypatch.setitem(sys.modules, "gguf", None)  # the [gguf] extra not installed
    assert main(["to-gguf", str(tmp_path / "mx.onnx"), str(tmp_path / "x.gguf")]) == 2
    assert capsys.readouterr().err.strip() == (
        "onnx-struct to-gguf: writing GGUF files needs gguf-py: pip install 'onnx-struct[gguf]'"
    )

"""GGUF file -> ONNX model: bytes verbatim (inline or referenced), decoders against gguf-py, metadata, CLI.

Every .gguf here is written by gguf-py's own GGUFWriter in tmp_path; the oracles are the bytes
gguf.quants.quantize produced and gguf.quants.dequantize of them, never our own output.
"""

from __future__ import annotations

import io
import json
import pathlib

import numpy as np
import onnx
import pytest

import onnx_struct as S
from onnx_struct import formats
from onnx_struct.cli import main
from onnx_struct.cli.from_gguf import ProgressBar
from onnx_struct.convert import convert, decode_metadata
from onnx_struct.formats.gguf.metadata import VALUE_TYPES_KEY

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType

# name -> (GGML type, numpy shape); a 3-D tensor, two tensors sharing a shape and type, a 1-D one.
TENSORS = {
    "token_embd.weight": (Q.F32, (3, 64)),
    "blk.0.attn_norm.weight": (Q.F32, (64,)),
    "blk.0.ffn_up.weight": (Q.F16, (2, 32)),
    "blk.0.attn_q.weight": (Q.Q8_0, (4, 64)),
    "blk.0.attn_k.weight": (Q.Q8_0, (4, 64)),
    "blk.0.ffn_down.weight": (Q.Q4_0, (2, 3, 64)),
}
METADATA = {
    "general.name": ("tiny", "STRING"),
    "llama.block_count": (2, "UINT32"),
    "llama.rope.freq_base": (10000.5, "FLOAT32"),
    "llama.attention.layer_norm_rms_epsilon": (1e-5, "FLOAT32"),
    "general.flag": (True, "BOOL"),
    "tokenizer.ggml.tokens": (["<s>", "é", 'a "quoted" token'], "ARRAY[STRING]"),
    "tokenizer.ggml.scores": ([0.1, -2.5, float("inf")], "ARRAY[FLOAT32]"),
    "tokenizer.ggml.token_type": ([1, 2, 3], "ARRAY[INT32]"),
}


def write_gguf(path: pathlib.Path, tensors=TENSORS, *, endianess=None, seed: int = 0) -> dict[str, tuple]:
    """Write ``tensors`` with gguf-py; returns name -> (GGML type, stored bytes, dequantized oracle)."""
    rng = np.random.default_rng(seed)
    kwargs = {} if endianess is None else {"endianess": endianess}
    writer = gguf.GGUFWriter(path, "llama", **kwargs)
    for key, (value, label) in METADATA.items():
        if label == "STRING":
            writer.add_string(key, value)
        elif label == "UINT32":
            writer.add_uint32(key, value)
        elif label == "FLOAT32":
            writer.add_float32(key, value)
        elif label == "BOOL":
            writer.add_bool(key, value)
        elif label == "ARRAY[INT32]":
            writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32)
        else:
            writer.add_array(key, value)
    expected = {}
    for name, (qtype, shape) in tensors.items():
        x = (rng.standard_normal(shape) * 2).astype(np.float32)
        if qtype == Q.F32:
            stored = x
        elif qtype == Q.F16:
            stored = x.astype(np.float16)
        else:
            stored = gguf.quants.quantize(x, qtype)
        writer.add_tensor(name, stored, raw_shape=None, raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)
        logical = stored if qtype in (Q.F32, Q.F16) else gguf.quants.dequantize(stored, qtype)
        expected[name] = (qtype, stored.tobytes(), np.asarray(logical, dtype=np.float32).reshape(shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gguf")
    path = directory / "tiny.gguf"
    return path, write_gguf(path)


def _save(model: onnx.ModelProto, path: pathlib.Path) -> pathlib.Path:
    path.write_bytes(model.SerializeToString())
    return path


def test_inline_conversion_checks_and_decodes_like_gguf_py(tiny, tmp_path):
    source, expected = tiny
    model_path = _save(convert(source), tmp_path / "tiny.onnx")
    S.check_model(model_path)
    values = {v.name: v for v in S.get_struct_values(model_path)}
    assert list(values) == list(TENSORS)  # file order, GGUF names
    for name, (_qtype, stored, logical) in expected.items():
        assert values[name].raw_data == stored  # the bytes gguf-py wrote, verbatim
        np.testing.assert_array_equal(S.decode(name, model_path), logical)


def test_declarations_follow_the_registered_formats(tiny):
    source, _ = tiny
    model = convert(source)
    declarations = S.get_struct_types(model)
    values = {v.name: v for v in S.get_struct_values(model)}
    for name, (qtype, shape) in TENSORS.items():
        root = declarations[values[name].type]
        assert root.name.startswith(f"{qtype.name}[")
        fmt = formats.get(qtype.name)
        assert root.array.dimension == fmt.num_blocks(shape)
        assert S.size_in_bits(root, model) // 8 == len(values[name].raw_data)
    # Same type and shape: one root declaration (one decoder) serves both tensors.
    assert values["blk.0.attn_q.weight"].type == values["blk.0.attn_k.weight"].type
    # The graph is a container: no nodes, inputs or outputs.
    assert not model.graph.node and not model.graph.input and not model.graph.output


def test_reference_mode_copies_no_tensor_byte_and_resolves_offsets(tiny, tmp_path):
    source, expected = tiny
    local = tmp_path / "weights" / "tiny.gguf"
    local.parent.mkdir()
    local.write_bytes(source.read_bytes())
    model_path = _save(convert(local, reference=True, model_dir=tmp_path), tmp_path / "ref.onnx")
    S.check_model(model_path)
    model_bytes = model_path.read_bytes()
    assert not any(stored in model_bytes for _, stored, _ in expected.values())  # no tensor byte run is copied
    file_bytes = local.read_bytes()
    for value in S.get_struct_values(model_path):
        assert not value.HasField("raw_data")
        entries = {e.key: e.value for e in value.external_data}
        assert entries["location"] == "weights/tiny.gguf"
        offset, length = int(entries["offset"]), int(entries["length"])
        _qtype, stored, logical = expected[value.name]
        assert file_bytes[offset : offset + length] == stored
        np.testing.assert_array_equal(S.decode(value.name, model_path), logical)


def test_reference_mode_defaults_to_the_gguf_directory(tiny):
    source, _ = tiny
    model = convert(source, reference=True)
    value = S.get_struct_values(model)[0]
    assert {e.key: e.value for e in value.external_data}["location"] == "tiny.gguf"
    S.check_model(model, base_dir=source.parent)


def test_reference_mode_rejects_a_gguf_outside_the_model_directory(tiny, tmp_path):
    source, _ = tiny
    with pytest.raises(S.ValidationError, match="must sit in the model's directory"):
        convert(source, reference=True, model_dir=tmp_path)


def test_metadata_is_kept_as_documented(tiny):
    source, _ = tiny
    props = {p.key: p.value for p in convert(source).metadata_props}
    assert props["general.name"] == "tiny"  # strings verbatim
    assert props["general.architecture"] == "llama"
    assert props["llama.block_count"] == "2"
    assert props["llama.attention.layer_norm_rms_epsilon"] == "1e-05"  # shortest float32 decimal
    assert props["general.flag"] == "true"
    assert json.loads(props["tokenizer.ggml.tokens"]) == ["<s>", "é", 'a "quoted" token']
    assert props["tokenizer.ggml.scores"] == "[0.1,-2.5,Infinity]"
    assert props["tokenizer.ggml.token_type"] == "[1,2,3]"
    types = json.loads(props[VALUE_TYPES_KEY])
    for key, (_value, label) in METADATA.items():
        assert types[key] == label
    assert props["onnx_struct.gguf.version"] == "3"
    decoded = decode_metadata(props)
    for key, (value, label) in METADATA.items():
        if label == "FLOAT32":
            assert np.float32(decoded[key]) == np.float32(value)
        elif label == "ARRAY[FLOAT32]":
            np.testing.assert_array_equal(np.float32(decoded[key]), np.float32(value))
        else:
            assert decoded[key] == value


def test_decode_metadata_takes_the_model_or_its_metadata_props_as_documented(tiny, tmp_path):
    source, _ = tiny
    path = _save(convert(source), tmp_path / "tiny.onnx")
    model = onnx.load(path)
    model.metadata_props.add(key="added.later", value="7")  # not from the GGUF file: not decoded
    from_model, from_props = decode_metadata(model), decode_metadata(model.metadata_props)
    assert from_model == from_props
    assert from_model["llama.block_count"] == 2 and from_model["general.flag"] is True
    assert from_model["tokenizer.ggml.tokens"] == ["<s>", "é", 'a "quoted" token']
    assert "added.later" not in from_model and VALUE_TYPES_KEY not in from_model
    assert decode_metadata(onnx.ModelProto()) == {}
    # The documented attribute path works: the package's `convert` is the function, and the
    # metadata reader sits beside it (the module is `conversion`).
    assert S.formats.gguf.decode_metadata is decode_metadata


@pytest.mark.parametrize(
    "label, value",
    [
        ("ARRAY[STRING]", ["ok", "\U0001f600", "a\ud800"]),  # a pair is fine, a lone half is not
        ("ARRAY[STRING]", ["\udc00"]),
        ("ARRAY[ARRAY[STRING]]", [["ok"], ["b\udfff"]]),
    ],
)
def test_decode_metadata_refuses_a_lone_surrogate_anywhere(label, value):
    props = {VALUE_TYPES_KEY: json.dumps({"k": label}), "k": json.dumps(value)}  # ensure_ascii: \\u escapes
    with pytest.raises(S.ValidationError, match="surrogates not allowed") as caught:
        decode_metadata(props)
    assert caught.value.path == "metadata_props['k']"
    paired = {VALUE_TYPES_KEY: json.dumps({"k": "ARRAY[STRING]"}), "k": json.dumps(["\U0001f600", "\x01"])}
    assert decode_metadata(paired)["k"] == ["\U0001f600", "\x01"]


def test_progress_bar_shows_a_stage_before_the_tensor_count_is_known():
    terminal = _Terminal()
    bar = ProgressBar(terminal, width=10)
    bar(0, 0, "reading x")  # total unknown: the label alone, no bar claiming to be full
    assert terminal.getvalue().startswith("\rreading x") and "[" not in terminal.getvalue()
    bar(1, 2, "a")
    assert "[#####.....] 1/2 a" in terminal.getvalue()


@pytest.fixture
def q8_unknown(monkeypatch):
    """Pretend the package does not know Q8_0 (the registry raises KeyError, as for any new type)."""
    real_get = formats.get

    def get(name):
        if name == "Q8_0":
            raise KeyError(name)
        return real_get(name)

    monkeypatch.setattr(formats, "get", get)


def test_unknown_type_is_a_validation_error_naming_tensor_and_type(tiny, q8_unknown):
    source, _ = tiny
    with pytest.raises(
        S.ValidationError, match=r"^gguf\.tensors\[3\] \('blk.0.attn_q.weight'\): GGML type Q8_0"
    ) as info:
        convert(source)
    assert info.value.details["gguf_type"] == "Q8_0"


@pytest.mark.parametrize("reference", [False, True])
def test_keep_unknown_keeps_raw_uint8_arrays(tiny, q8_unknown, tmp_path, reference):
    source, expected = tiny
    model = convert(source, keep_unknown=True, reference=reference)
    S.check_model(model, base_dir=source.parent)
    declarations = S.get_struct_types(model)
    value = next(v for v in S.get_struct_values(model) if v.name == "blk.0.attn_q.weight")
    root = declarations[value.type]
    assert root.WhichOneof("kind") == "array" and not root.HasField("decoder")
    assert root.array.element_type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert root.array.dimension == len(expected["blk.0.attn_q.weight"][1])
    assert {p.key: p.value for p in root.metadata_props} == {"gguf.type": "Q8_0", "gguf.shape": "[4, 64]"}
    if not reference:
        assert value.raw_data == expected["blk.0.attn_q.weight"][1]
    with pytest.raises(S.ValidationError, match="no decoder"):
        S.decode("blk.0.attn_q.weight", model, base_dir=source.parent)


def test_not_a_gguf_file_is_a_validation_error(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file at all" * 4)
    with pytest.raises(S.ValidationError, match=r"^gguf\.header: not a GGUF file"):
        convert(bogus)


def test_truncated_file_is_a_validation_error(tiny, tmp_path):
    source, _ = tiny
    data = source.read_bytes()
    for cut in (len(data) - 100, 40):  # inside the tensor data; inside the metadata
        truncated = tmp_path / f"cut{cut}.gguf"
        truncated.write_bytes(data[:cut])
        with pytest.raises(S.ValidationError):
            convert(truncated)


@pytest.mark.parametrize("key", ["general.name", "tokenizer.ggml.tokens"])
def test_metadata_string_that_is_not_utf8_is_a_validation_error(tiny, tmp_path, key):
    # gguf-py decodes string values only when asked (field.contents()); the pre-scan refuses them
    # before gguf-py runs.
    source, _ = tiny
    text = {"general.name": b"tiny", "tokenizer.ggml.tokens": "é".encode()}[key]
    data = source.read_bytes()
    assert data.count(text) == 1
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(data.replace(text, b"\xff" * len(text)))
    with pytest.raises(S.ValidationError, match="not valid UTF-8") as info:
        convert(bad)
    index = list(METADATA).index(key) + 1  # general.architecture, written by GGUFWriter, comes first
    assert info.value.path == f"gguf.kv[{index}] ({key!r})"
    assert main(["from-gguf", str(bad), str(tmp_path / "bad.onnx"), "--quiet"]) == 1


def test_big_endian_file_is_rejected(tmp_path):
    path = tmp_path / "be.gguf"
    write_gguf(path, {"w": (Q.F32, (2, 32))}, endianess=gguf.GGUFEndian.BIG)
    with pytest.raises(S.ValidationError, match="big-endian"):
        convert(path)


def test_progress_is_reported_per_tensor(tiny):
    source, _ = tiny
    calls = []
    convert(source, progress=lambda done, total, name: calls.append((done, total, name)))
    # First a stage before gguf-py reads the file (seconds for a big vocabulary), then each tensor.
    assert calls[0] == (0, 0, f"reading the header and metadata of {source.name}")
    assert calls[1:] == [(i + 1, len(TENSORS), name) for i, name in enumerate(TENSORS)]


# ---------------------------------------------------------------------------------- CLI


def test_cli_from_gguf_inline_and_reference(tiny, tmp_path, capsys):
    source, expected = tiny
    local = tmp_path / "tiny.gguf"
    local.write_bytes(source.read_bytes())
    assert main(["from-gguf", str(local), str(tmp_path / "a.onnx"), "--quiet"]) == 0
    assert main(["from-gguf", str(local), str(tmp_path / "b.onnx"), "--reference"]) == 0
    assert capsys.readouterr().out == ""  # the progress bar and summary go to stderr
    for name in ("a.onnx", "b.onnx"):
        S.check_model(tmp_path / name)
        np.testing.assert_array_equal(
            S.decode("blk.0.ffn_down.weight", tmp_path / name), expected["blk.0.ffn_down.weight"][2]
        )
    assert (tmp_path / "b.onnx").stat().st_size < (tmp_path / "a.onnx").stat().st_size


def test_cli_from_gguf_exit_codes(tiny, tmp_path, q8_unknown, capsys):
    source, _ = tiny
    out = tmp_path / "x.onnx"
    assert main(["from-gguf", str(source), str(out)]) == 1
    assert "Q8_0" in capsys.readouterr().err and not out.exists()
    assert main(["from-gguf", str(source), str(out), "--keep-unknown", "--quiet"]) == 0
    assert main(["from-gguf", str(tmp_path / "missing.gguf"), str(out)]) == 2
    assert main(["from-gguf", str(source), str(tmp_path / "elsewhere" / "x.onnx"), "--reference"]) == 1
    with pytest.raises(SystemExit) as usage:
        main(["from-gguf", str(source)])
    assert usage.value.code == 2


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_only_on_a_terminal():
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        bar = ProgressBar(stream, width=10)
        bar(1, 4, "a")
        bar(4, 4, "b")
        bar.close()
    assert pipe.getvalue() == ""
    assert "\r[##........] 1/4 a" in terminal.getvalue() and "[##########] 4/4 b" in terminal.getvalue()
    assert terminal.getvalue().endswith("\n")
    quiet = _Terminal()
    bar = ProgressBar(quiet, enabled=False)
    bar(1, 1, "a")
    assert quiet.getvalue() == ""


def test_every_registered_ggml_type_converts_and_decodes_like_gguf_py(tmp_path):
    """One tensor per GGML type that both gguf-py and the registry know, with random block bytes
    (scales included, so non-finite values occur and must match too)."""
    rng = np.random.default_rng(3)
    known = set(formats.names())
    types = [t for t in Q if t.name in known and t not in (Q.F32, Q.F16)]
    assert {Q.Q4_0, Q.Q8_0, Q.BF16} <= set(types)
    writer = gguf.GGUFWriter(tmp_path / "all.gguf", "llama")
    expected = {}
    for qtype in types:
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        shape = (2, 2 * block_size)  # two rows of two blocks
        data = rng.integers(0, 256, (shape[0], 2 * type_size), dtype=np.uint8)
        writer.add_tensor(qtype.name, data, raw_dtype=qtype)
        with np.errstate(invalid="ignore", over="ignore"):  # random scales: inf * 0 is expected
            expected[qtype.name] = gguf.quants.dequantize(data, qtype).reshape(shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model_path = _save(convert(tmp_path / "all.gguf"), tmp_path / "all.onnx")
    S.check_model(model_path)
    for name, want in expected.items():
        got = S.decode(name, model_path)
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, equal_nan=True, err_msg=name)


def test_a_type_without_a_format_in_a_real_file(tmp_path):
    """An integer tensor (GGML I32/I8/...: no block format) as gguf-py writes it from numpy."""
    dtypes = {"I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64, "F64": np.float64}
    name = next((n for n in dtypes if n not in formats.names()), None)
    if name is None:
        pytest.skip("every plain GGML type has a registered format")
    data = np.arange(64, dtype=dtypes[name]).reshape(2, 32)
    path = tmp_path / "ints.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tensor("positions", data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(
        S.ValidationError, match=rf"^gguf\.tensors\[0\] \('positions'\): GGML type {name} has no registered"
    ):
        convert(path)
    model = convert(path, keep_unknown=True)
    S.check_model(model)
    (value,) = S.get_struct_values(model)
    assert value.raw_data == data.tobytes()
    root = S.get_struct_types(model)[value.type]
    assert root.name == f"{name}_raw" and root.array.dimension == data.nbytes

"""save_with_external_data / load_with_external_data: byte-for-byte round trips through files,
alignment, per-value files, stock initializers, re-saving over the source, and bad options."""

from __future__ import annotations

import mmap

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import numpy_helper

import onnx_struct
from onnx_struct import (
    ValidationError,
    add_struct_types,
    add_struct_values,
    load_with_external_data,
    make_array,
    make_bit_packing,
    make_field,
    make_struct_value,
    make_structure,
    make_tensor_type,
    save_with_external_data,
    view,
)

RNG = np.random.default_rng(7)


def build_model():
    """Three struct values (2000, 3001 and 10 bytes) and two stock initializers (big, small)."""
    big = numpy_helper.from_array(RNG.standard_normal((40, 50)).astype(np.float32), "big")
    small = numpy_helper.from_array(np.arange(3, dtype=np.int64), "small")
    graph = onnx.helper.make_graph([], "g", [], [], initializer=[big, small])
    model = onnx.helper.make_model(graph)
    q4 = make_structure([make_field("d", T.FLOAT16), make_field("qs", make_tensor_type(T.UINT8, [16]))])
    _, index = add_struct_types(model, q4, make_array(onnx_struct.make_type_reference(0), 100))
    payloads = {
        "a": RNG.integers(0, 256, 2000, dtype=np.uint8).tobytes(),
        "b": RNG.integers(0, 256, 3001, dtype=np.uint8).tobytes(),
        "c": RNG.integers(0, 256, 10, dtype=np.uint8).tobytes(),
    }
    types = {
        "a": make_array(T.UINT8, 2000),
        "b": make_bit_packing([("x", 3), ("y", 5)], 3001),
        "c": make_array(T.INT4, 20),
    }
    add_struct_values(model, *(make_struct_value(n, types[n], raw_data=p) for n, p in payloads.items()))
    add_struct_values(model, make_struct_value("q", index, raw_data=RNG.integers(0, 256, 18 * 100, np.uint8).tobytes()))
    payloads["q"] = onnx_struct.get_struct_values(model)[-1].raw_data
    return model, payloads


def externals(path):
    return {v.name: {e.key: e.value for e in v.external_data} for v in onnx_struct.get_struct_values(path)}


def assert_round_trip(path, model, payloads, check=True):
    for name, payload in payloads.items():
        v = view(name, path)
        assert v.buffer.tobytes() == payload, name
    loaded = onnx.load(path)
    for tensor in model.graph.initializer:
        got = next(t for t in loaded.graph.initializer if t.name == tensor.name)
        assert np.array_equal(numpy_helper.to_array(got), numpy_helper.to_array(tensor))
    if check:  # see test_check_model_of_saved_model_with_external_tensors
        onnx_struct.check_model(path)


def test_one_shared_file_with_alignment(tmp_path):
    model, payloads = build_model()
    original = model.SerializeToString()
    path = tmp_path / "model.onnx"
    save_with_external_data(model, path, align=64, size_threshold=100)
    assert model.SerializeToString() == original  # the input is not modified
    refs = externals(path)
    assert refs["c"] == {}  # 10 bytes < threshold: inline
    data = (tmp_path / "model.onnx.data").read_bytes()
    previous_end = 0
    for name in ("a", "b", "q"):
        ref = refs[name]
        offset, length = int(ref["offset"]), int(ref["length"])
        assert ref["location"] == "model.onnx.data" and offset % 64 == 0 and length == len(payloads[name])
        assert data[offset : offset + length] == payloads[name]
        assert data[previous_end:offset] == bytes(offset - previous_end)  # zero padding
        previous_end = offset + length
    assert len(data) > previous_end  # onnx appended the big tensor after the struct payloads
    stock = onnx.load(path, load_external_data=False)
    big = next(t for t in stock.graph.initializer if t.name == "big")
    assert {e.key: e.value for e in big.external_data}["location"] == "model.onnx.data"
    assert_round_trip(path, model, payloads, check=False)


def test_views_of_saved_model_read_the_payload_once_into_memory(tmp_path):
    model, payloads = build_model()
    path = tmp_path / "model.onnx"
    save_with_external_data(model, path, size_threshold=0)
    v = view("a", path)
    array = v[""]
    assert not array.flags.writeable and array.tobytes() == payloads["a"]
    base = array
    while getattr(base, "base", None) is not None:
        base = base.base
    assert not isinstance(base, (memoryview, mmap.mmap))  # a copy (a buffer_pool lease), not a memory map
    data = path.with_name("model.onnx.data")
    data.write_bytes(bytes(data.stat().st_size))  # the file changes after the first read ...
    assert v[""].tobytes() == payloads["a"]  # ... and the view keeps the bytes it checked


def test_one_file_per_value_and_custom_location(tmp_path):
    model, payloads = build_model()
    path = tmp_path / "m.onnx"
    save_with_external_data(model, path, one_file_per_value=True, size_threshold=1)
    refs = externals(path)
    assert {refs[n]["location"] for n in payloads} == {"a.bin", "b.bin", "c.bin", "q.bin"}
    assert all(refs[n]["offset"] == "0" for n in payloads)
    assert (tmp_path / "big").exists()  # onnx's per-tensor file
    assert_round_trip(path, model, payloads, check=False)

    other = tmp_path / "sub"
    other.mkdir()
    save_with_external_data(model, other / "m.onnx", location="all.bin", convert_tensors=False)
    assert {r.get("location") for r in externals(other / "m.onnx").values()} == {"all.bin", None}
    stock = onnx.load(other / "m.onnx", load_external_data=False)
    assert all(not t.external_data for t in stock.graph.initializer)  # tensors stayed inline
    assert_round_trip(other / "m.onnx", model, payloads)


def test_resave_over_itself_and_back_inline(tmp_path):
    model, payloads = build_model()
    path = tmp_path / "model.onnx"
    save_with_external_data(model, path, size_threshold=0)
    # the source payloads live in model.onnx.data, which this save truncates and rewrites
    save_with_external_data(path, path, align=4096, size_threshold=0)
    assert all(int(r["offset"]) % 4096 == 0 for r in externals(path).values())
    assert_round_trip(path, model, payloads, check=False)
    inline = load_with_external_data(path, inline_struct_payloads=True)
    values = {v.name: v for v in onnx_struct.get_struct_values(inline)}
    assert {n: v.raw_data for n, v in values.items()} == payloads
    assert all(not v.external_data for v in values.values())
    kept = load_with_external_data(path)
    assert all(v.external_data for v in onnx_struct.get_struct_values(kept))


def test_nothing_external_leaves_no_data_file(tmp_path):
    model, payloads = build_model()
    save_with_external_data(model, tmp_path / "m.onnx", size_threshold=1 << 30)
    assert not (tmp_path / "m.onnx.data").exists()
    assert_round_trip(tmp_path / "m.onnx", model, payloads)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"location": "../x.data"}, "contains '..'"),
        ({"location": "/tmp/x.data"}, "absolute"),
        ({"align": 0}, "alignment must be a positive"),
        ({"size_threshold": -1}, "threshold must be non-negative"),
    ],
)
def test_bad_options(tmp_path, options, match):
    model, _ = build_model()
    with pytest.raises(ValidationError, match=match):
        save_with_external_data(model, tmp_path / "m.onnx", **options)


def test_source_payload_with_wrong_size_is_refused(tmp_path):
    model, _ = build_model()
    save_with_external_data(model, tmp_path / "m.onnx", size_threshold=0, convert_tensors=False)
    (tmp_path / "m.onnx.data").write_bytes(b"\x00" * 10)  # truncated data file
    with pytest.raises(ValidationError, match=r"graph.struct_initializer\[0\] \('a'\).*fewer than"):
        save_with_external_data(tmp_path / "m.onnx", tmp_path / "out.onnx")
    save_with_external_data(model, tmp_path / "m.onnx", size_threshold=0)
    (tmp_path / "m.onnx.data").write_bytes(b"\x00" * 10)
    with pytest.raises(
        ValidationError, match=r"graph.initializer\[0\] \('big'\).external_data: offset \d+ is past the end"
    ):
        save_with_external_data(tmp_path / "m.onnx", tmp_path / "out.onnx")


def test_check_model_of_saved_model_with_external_tensors(tmp_path, monkeypatch):
    model, _ = build_model()
    save_with_external_data(model, tmp_path / "m.onnx", size_threshold=0)
    monkeypatch.chdir("/")  # the files are found relative to the model, not the working directory
    onnx_struct.check_model(tmp_path / "m.onnx")
    onnx_struct.check_model(tmp_path / "m.onnx", full_check=True)
    for path in tmp_path.iterdir():
        if path.suffix != ".onnx":
            path.unlink()
    messages = [str(d) for d in onnx_struct.validate(tmp_path / "m.onnx")]
    assert any("external_data: external file" in m and "cannot be opened" in m for m in messages), messages


def test_two_values_of_one_name_keep_their_own_payloads(tmp_path):
    """An invalid model (check_model refuses the duplicate name) is still saved and loaded back
    without losing data: values were read by name, so the second got the first one's bytes
    (found by a red-team pass)."""
    graph = onnx.helper.make_graph([], "g", [], [])
    model = onnx.helper.make_model(graph)
    first, second = bytes([1]) * 16, bytes([2]) * 32
    add_struct_values(
        model,
        make_struct_value("w", make_array(T.UINT8, 16), raw_data=first),
        make_struct_value("w", make_array(T.UINT8, 32), raw_data=second),
    )
    path = tmp_path / "m.onnx"
    save_with_external_data(model, path, size_threshold=0)
    loaded = load_with_external_data(path, inline_struct_payloads=True)
    assert [v.raw_data for v in onnx_struct.get_struct_values(loaded)] == [first, second]
    with pytest.raises(ValidationError, match="duplicate struct value name"):
        onnx_struct.check_model(path)


def test_a_link_swapped_in_after_resolution_is_named_a_link(tmp_path):
    """The reader opens a resolved file without following links; a link found there (swapped in
    since) was reported as "is not a regular file, not a regular file"."""
    from onnx_struct.payload import external

    (tmp_path / "real.bin").write_bytes(bytes(4))
    (tmp_path / "w.bin").symlink_to("real.bin")
    with pytest.raises(
        ValidationError, match=r"^v: external file 'w.bin' is a symbolic link, not a regular file; refused unopened$"
    ):
        external.read_range(tmp_path / "w.bin", 0, 4, "v")

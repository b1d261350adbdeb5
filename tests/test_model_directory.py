"""Where a model file's external payloads are looked up when the file is reached through a
symlink: the directory its path names, as onnx and onnxruntime take it, with files that resolve
into the directory of the linked file also admitted (Hugging Face's cache: snapshots/ links into
blobs/). Files elsewhere stay refused."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.models import cast_decoder

import onnx_struct as S

PAYLOAD = bytes([1, 2, 3, 4])


def _model(payload: bytes = PAYLOAD) -> onnx.ModelProto:
    """One struct value V (UINT8[4], Cast decoder) and one stock initializer T beside it."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["V", "T"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    model.graph.initializer.append(numpy_helper.from_array(np.frombuffer(payload, np.uint8).astype(np.float32), "T"))
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4, decoder=cast_decoder()))
    S.add_struct_values(model, S.make_struct_value("V", index, raw_data=payload))
    return model


def _save(model: onnx.ModelProto, path) -> None:
    S.save_with_external_data(model, path, location="w.bin", size_threshold=0)


def _lower_and_run(source, out) -> None:
    """`onnx-struct lower SOURCE OUT`; OUT passes onnx's checker and onnx's reference evaluator
    computes V + T from it (the oracle: the payload's bytes, twice)."""
    from onnx.reference import ReferenceEvaluator

    done = subprocess.run(
        [sys.executable, "-m", "onnx_struct", "lower", str(source), str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    onnx.checker.check_model(str(out))
    (y,) = ReferenceEvaluator(str(out)).run(None, {})
    assert y.tolist() == [2.0 * b for b in PAYLOAD]


def test_a_linked_model_reads_the_files_beside_its_link_as_onnx_does(tmp_path):
    """a/m.onnx -> ../b/m.onnx with a w.bin in both: onnx.load reads the stock tensor from a/,
    so the struct payload comes from a/ too (it came from b/, the linked file's directory)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _save(_model(), tmp_path / "b" / "m.onnx")
    _save(_model(bytes([9, 8, 7, 6])), tmp_path / "a" / "own.onnx")  # a/w.bin holds other bytes
    os.symlink("../b/m.onnx", tmp_path / "a" / "m.onnx")
    linked = str(tmp_path / "a" / "m.onnx")

    stock = numpy_helper.to_array(onnx.load(linked).graph.initializer[0])
    assert stock.tolist() == [9, 8, 7, 6]  # the oracle: onnx's own choice of directory
    assert S.decode("V", linked).tolist() == stock.tolist()
    (y,) = S.InferenceSession(linked).run(None, {})
    assert y.tolist() == (2 * stock).tolist()


def test_a_hugging_face_cache_layout_is_accepted(tmp_path):
    """snapshots/rev/m.onnx and snapshots/rev/w.bin are links to content-named files in blobs/:
    the payload resolves outside the snapshot's directory but inside the linked file's."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    _save(_model(), blobs / "staging.onnx")
    (blobs / "staging.onnx").rename(blobs / "aa11")
    (blobs / "w.bin").rename(blobs / "bb22")
    os.symlink("../../blobs/aa11", snapshot / "m.onnx")
    os.symlink("../../blobs/bb22", snapshot / "w.bin")
    path = str(snapshot / "m.onnx")

    S.check_model(path, full_check=True)
    assert S.decode("V", path).tolist() == list(PAYLOAD)
    (y,) = S.InferenceSession(path).run(None, {})
    assert y.tolist() == [2.0 * b for b in PAYLOAD]


@pytest.mark.parametrize("linked_model", [False, True])
def test_a_payload_linked_elsewhere_is_still_refused(tmp_path, linked_model):
    """The second directory is the linked model file's, no other: a payload link into a third
    directory is refused whether or not the model file is a link."""
    model_dir, real_dir, elsewhere = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (model_dir, real_dir, elsewhere):
        folder.mkdir()
    _save(_model(), real_dir / "m.onnx")
    (real_dir / "w.bin").rename(elsewhere / "secret.bin")
    if linked_model:
        os.symlink("../b/m.onnx", model_dir / "m.onnx")
    else:
        (real_dir / "m.onnx").rename(model_dir / "m.onnx")
    os.symlink("../c/secret.bin", model_dir / "w.bin")
    with pytest.raises(
        S.ValidationError, match=r"struct_initializer\[0\] \('V'\)\.external_data: .*outside the model directory"
    ):
        S.decode("V", str(model_dir / "m.onnx"))
    with pytest.raises(S.ValidationError, match="outside the model directory"):
        S.check_model(str(model_dir / "m.onnx"))


@pytest.mark.slow
def test_lower_keeps_references_only_where_they_stay_valid(tmp_path):
    """`onnx-struct lower` beside a linked model: the output is a plain file, so references that
    only the link's second directory admits are not kept; the output checks and runs."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snap"
    blobs.mkdir()
    snapshot.mkdir()
    _save(_model(), blobs / "m.onnx")
    os.symlink("../blobs/m.onnx", snapshot / "m.onnx")
    os.symlink("../blobs/w.bin", snapshot / "w.bin")
    out = snapshot / "lowered.onnx"
    _lower_and_run(snapshot / "m.onnx", out)


@pytest.mark.slow
def test_lower_into_another_directory_takes_the_stock_tensors_along(tmp_path):
    """The lowered model kept its stock initializer's reference to w.bin, a file its new
    directory does not have: onnx.load failed on it (FileNotFoundError)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    _save(_model(), tmp_path / "src" / "m.onnx")
    out = tmp_path / "dst" / "lowered.onnx"
    _lower_and_run(tmp_path / "src" / "m.onnx", out)


@pytest.mark.slow
def test_a_tensor_without_length_is_inlined_at_its_types_size(tmp_path):
    """Inlining a stock tensor whose external_data has no length took the rest of the file, as
    onnx.load does; onnxruntime takes the type's size, and refused the lowered or re-saved model
    (raw_data of 32 bytes for FLOAT[4]; found by a red-team pass)."""
    import onnxruntime as ort

    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    graph = helper.make_graph(
        [helper.make_node("Identity", ["T"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    tensor = model.graph.initializer.add(name="T", data_type=TensorProto.FLOAT, dims=[4])
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="t.bin")
    (tmp_path / "src" / "t.bin").write_bytes(np.float32([1, 2, 3, 4, 9, 9, 9, 9]).tobytes())
    onnx.save(model, tmp_path / "src" / "m.onnx")
    (expected,) = ort.InferenceSession(str(tmp_path / "src" / "m.onnx")).run(None, {})  # the oracle
    assert expected.tolist() == [1, 2, 3, 4]

    out = tmp_path / "dst" / "lowered.onnx"
    done = subprocess.run(
        [sys.executable, "-m", "onnx_struct", "lower", str(tmp_path / "src" / "m.onnx"), str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    (y,) = ort.InferenceSession(str(out)).run(None, {})
    assert y.tolist() == expected.tolist()

    S.save_with_external_data(str(tmp_path / "src" / "m.onnx"), tmp_path / "dst" / "saved.onnx", size_threshold=1 << 20)
    (y,) = ort.InferenceSession(str(tmp_path / "dst" / "saved.onnx")).run(None, {})
    assert y.tolist() == expected.tolist()

    (tmp_path / "src" / "t.bin").write_bytes(np.float32([1, 2, 3]).tobytes())  # shorter than the type
    with pytest.raises(
        S.ValidationError, match=r"graph\.initializer\[0\] \('T'\).*fewer than the 16 bytes of the tensor's type"
    ):
        S.load_with_external_data(str(tmp_path / "src" / "m.onnx"))


def test_a_session_feed_resolves_in_both_directories(tmp_path):
    """A struct input fed as an external StructProto of a linked model: view resolved it into the
    linked file's directory, the session's run did not (its base directory lost the second root;
    found by a red-team pass)."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snap"
    blobs.mkdir()
    snapshot.mkdir()
    graph = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4, decoder=cast_decoder()))
    S.add_value_infos(model, inputs=[S.make_struct_value_info("W", index)])
    onnx.save(model, blobs / "m.onnx")
    (blobs / "w.bin").write_bytes(PAYLOAD)
    os.symlink("../blobs/m.onnx", snapshot / "m.onnx")
    os.symlink("../blobs/w.bin", snapshot / "w.bin")
    feed = S.make_struct_value("W", index, external_data={"location": "w.bin", "offset": 0, "length": 4})
    path = str(snapshot / "m.onnx")
    assert S.view(feed, path)[""].tolist() == list(PAYLOAD)
    (y,) = S.InferenceSession(path).run(None, {"W": feed})
    assert y.tolist() == [float(b) for b in PAYLOAD]


def test_a_looping_base_dir_or_destination_is_an_os_error(tmp_path):
    """Python 3.11's Path.resolve raises RuntimeError on a symlink loop: it escaped from a
    base_dir, a save destination and a location's directory (found by a red-team pass). A path
    the caller names is an OSError (ELOOP), as a missing one is; a location is a ValidationError."""
    import errno

    (tmp_path / "d").symlink_to("d")
    model = _model()
    for call in (
        lambda: S.check_model(model, base_dir=tmp_path / "d"),
        lambda: S.InferenceSession(model, base_dir=tmp_path / "d"),
        lambda: S.save_with_external_data(model, tmp_path / "d" / "m.onnx"),
    ):
        with pytest.raises(OSError) as caught:
            call()
        assert caught.value.errno == errno.ELOOP
    with pytest.raises(S.ValidationError, match=r"^location: 'd/w.bin': its directory cannot be resolved"):
        S.save_with_external_data(model, tmp_path / "m.onnx", location="d/w.bin", size_threshold=0)

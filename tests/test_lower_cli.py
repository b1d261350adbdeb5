"""onnx-struct lower IN OUT [--compact]: exit codes and the written model."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from support.models import linear_model
from support.oracles import int4_oracle

from onnx_struct.cli import main


def write(tmp_path, payload: bytes, name: str = "m.onnx") -> str:
    path = tmp_path / name
    onnx.save(linear_model(payload), path)
    return str(path)


def test_lower_writes_a_model_onnxruntime_runs(tmp_path, capsys):
    payload = bytes(range(64))
    out = tmp_path / "plain.onnx"
    assert main(["lower", write(tmp_path, payload), str(out)]) == 0
    assert "1 decoder functions" in capsys.readouterr().out
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    (y,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"X": np.zeros(128, np.float32)}
    )
    np.testing.assert_array_equal(y, np.maximum(int4_oracle(payload) * np.float32(0.125), 0))


def test_compact_lists_leaves_as_inputs(tmp_path):
    out = tmp_path / "plain.onnx"
    assert main(["lower", write(tmp_path, bytes(64)), str(out), "--compact"]) == 0
    assert "weight::values" in [i.name for i in onnx.load(out).graph.input]


def test_exit_codes(tmp_path, capsys):
    assert main(["lower", write(tmp_path, bytes(63)), str(tmp_path / "o.onnx")]) == 1
    assert "63 bytes" in capsys.readouterr().err
    assert main(["lower", str(tmp_path / "missing.onnx"), str(tmp_path / "o.onnx")]) == 2


def test_a_lowered_model_over_protobufs_limit_goes_out_with_external_tensors(tmp_path, monkeypatch):
    """The > 2 GiB path (here with the limit lowered to 0 bytes) writes OUT and OUT.data through the
    model-directory writer; it used onnx.save_model, which writes through a link at OUT.data."""
    import onnx_struct.cli.lower as lower_command

    monkeypatch.setattr(lower_command, "PROTOBUF_LIMIT", 0)
    payload = np.random.default_rng(3).integers(0, 256, 64, dtype=np.uint8).tobytes()
    model = linear_model(payload)
    extra = np.arange(1024, dtype=np.float32)  # 4 KiB: over the 1 KiB threshold, so it goes to OUT.data
    model.graph.initializer.append(onnx.numpy_helper.from_array(extra, "extra"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("extra", onnx.TensorProto.FLOAT, [1024]))
    source = str(tmp_path / "m.onnx")
    onnx.save(model, source)
    out = tmp_path / "sub"
    out.mkdir()
    (tmp_path / "victim.txt").write_text("keep")
    (out / "big.onnx.data").symlink_to(tmp_path / "victim.txt")
    assert main(["lower", source, str(out / "big.onnx")]) == 2  # a link at OUT.data is refused
    assert (tmp_path / "victim.txt").read_text() == "keep" and not (out / "big.onnx").exists()
    (out / "big.onnx.data").unlink()
    # 'a:b.onnx.data' would be written into OUT as a location no loader takes (it reads as a drive)
    assert main(["lower", source, str(out / "a:b.onnx")]) == 2
    assert sorted(p.name for p in out.iterdir()) == []
    assert main(["lower", source, str(out / "big.onnx")]) == 0
    model = onnx.load(out / "big.onnx")  # onnx's own loader reads OUT.data
    assert any(
        t.data_location == onnx.TensorProto.EXTERNAL
        for t in onnx.load(out / "big.onnx", load_external_data=False).graph.initializer
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.zeros(128, np.float32)
    y, kept = session.run(None, {"X": x})
    np.testing.assert_array_equal(kept, extra)
    expected = np.maximum(x + (int4_oracle(payload) * np.float32(0.125)), 0)
    np.testing.assert_allclose(y, expected, rtol=1e-6)

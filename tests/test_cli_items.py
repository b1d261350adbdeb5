"""The CLI faults a new user met (issue 30, item 6), each pinned: a negative --min-elements, a
missing output directory, check --json on a file that is no model, inspect of a plain model, and
a GGUF file under an .onnx name, for check, inspect and quantize."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from onnx_struct.cli import main


@pytest.fixture
def plain(tmp_path) -> str:
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", "W"], ["Y"])],
        "plain",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 64])],
        [w],
    )
    path = tmp_path / "plain.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10), path)
    return str(path)


@pytest.fixture
def gguf_as_onnx(tmp_path) -> str:
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("t", np.ones((4, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    renamed = tmp_path / "model.onnx"
    path.rename(renamed)
    return str(renamed)


@pytest.mark.parametrize("value", ["-5", "-1", "many"])
def test_min_elements_must_be_a_count(plain, tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exit_info:  # argparse's usage error
        main(["quantize", plain, str(tmp_path / "q.onnx"), "--format", "Q8_0", "--min-elements", value])
    assert exit_info.value.code == 2
    assert "argument --min-elements:" in capsys.readouterr().err
    assert not (tmp_path / "q.onnx").exists()


def test_a_missing_output_directory_is_blamed(plain, tmp_path, capsys):
    out = tmp_path / "nodir" / "out.onnx"
    assert main(["quantize", plain, str(out), "--format", "Q8_0"]) == 2
    err = capsys.readouterr().err
    assert err == f"onnx-struct quantize: OUT {out}: the directory {tmp_path / 'nodir'} does not exist\n"


@pytest.mark.parametrize("content", [b"", b"\x12\xff\xff", b"GGUF\x03\x00\x00\x00"])
def test_check_json_of_a_file_that_is_no_model_has_the_error_key(tmp_path, capsys, content):
    path = tmp_path / "m.onnx"
    path.write_bytes(content)
    assert main(["check", str(path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    assert report["error"]["code"] == "not_parsable"
    assert report["error"] == report["diagnostics"][0]


def test_inspect_of_a_plain_model_says_it_has_no_struct_parts(plain, capsys):
    assert main(["inspect", plain]) == 0
    assert capsys.readouterr().out == f"{plain}: no struct parts (no struct_types, no struct values)\n"


@pytest.mark.parametrize("command", [["check"], ["inspect"], ["quantize", "--format", "Q8_0"]])
def test_a_gguf_file_named_onnx_is_recognised(gguf_as_onnx, tmp_path, capsys, command):
    args = [command[0], gguf_as_onnx, *([str(tmp_path / "q.onnx")] if command[0] == "quantize" else []), *command[1:]]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"{gguf_as_onnx} is a GGUF file, not an ONNX model; convert it first: onnx-struct from-gguf" in err


def test_quantize_external_writes_the_payloads_beside_the_model(plain, tmp_path):
    import onnx_struct as S  # noqa: PLC0415

    out = tmp_path / "q.onnx"
    assert main(["quantize", plain, str(out), "--format", "Q8_0", "--external", "--quiet"]) == 0
    (value,) = S.get_struct_values(out)
    assert value.name == "W_T" and len(value.external_data) and not value.raw_data
    data = (tmp_path / "q.onnx.data").read_bytes()
    assert len(data) == 64 * 2 * 34  # W^T [64, 64]: 128 Q8_0 blocks of 34 bytes (GGML_QUANT_SIZES)
    x = np.ones((1, 64), np.float32)
    got = S.InferenceSession(str(out), accuracy_level=0).run(None, {"X": x})[0]
    np.testing.assert_allclose(got, x @ np.ones((64, 64)), rtol=1e-3)

"""onnx-struct decode MODEL NAME -o OUT.npy [--runtime reference]: exit codes and the saved array."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from support.models import linear_model
from support.oracles import int4_oracle

from onnx_struct.cli import main


@pytest.mark.parametrize("runtime_name", ["onnxruntime", "reference"])
def test_decode_saves_the_logical_value(tmp_path, capsys, runtime_name):
    payload = bytes(range(64))
    path = tmp_path / "m.onnx"
    onnx.save(linear_model(payload), path)
    out = tmp_path / "w.npy"
    assert main(["decode", str(path), "weight", "-o", str(out), "--runtime", runtime_name]) == 0
    assert "weight: float32 [128]" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(out), int4_oracle(payload) * np.float32(0.125))


def test_exit_codes(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(linear_model(bytes(64)), path)
    # a NAME that names nothing is a usage error, as for inspect --value (it exited 1)
    assert main(["decode", str(path), "nope", "-o", str(tmp_path / "o.npy")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"onnx-struct decode: {path}: ") and "no struct value named 'nope'" in err
    assert err.count("\n") == 1
    assert main(["decode", str(tmp_path / "missing.onnx"), "weight", "-o", str(tmp_path / "o.npy")]) == 2
    with pytest.raises(SystemExit) as info:
        main(["decode", str(path), "weight"])  # -o is required
    assert info.value.code == 2

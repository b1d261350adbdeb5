"""The onnx-struct console script: check subcommand, exit codes, --json, --help."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import onnx
import pytest
from support.models import linear_int4_128, model_with

import onnx_struct as S
from onnx_struct.cli import main


def write(tmp_path, size):
    path = tmp_path / "m.onnx"
    onnx.save(model_with([linear_int4_128()], [S.make_struct_value("weight", 0, raw_data=bytes(size))]), path)
    return str(path)


def test_valid_model_exits_0(tmp_path, capsys):
    assert main(["check", write(tmp_path, 64)]) == 0
    assert capsys.readouterr().out.strip().endswith(": valid")


def test_invalid_model_exits_1_with_path_bearing_diagnostics(tmp_path, capsys):
    assert main(["check", write(tmp_path, 63)]) == 1
    err = capsys.readouterr().err
    assert "graph.struct_initializer[0] ('weight'): payload is 63 bytes; the type requires 64" in err


def test_json_output(tmp_path, capsys):
    assert main(["check", write(tmp_path, 65), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    (diagnostic,) = report["diagnostics"]
    assert diagnostic["path"] == "graph.struct_initializer[0] ('weight')"
    assert (diagnostic["expected"], diagnostic["actual"]) == (64, 65)
    assert main(["check", write(tmp_path, 64), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(tmp_path / "m.onnx"), "valid": True, "diagnostics": []}


def test_missing_file_and_usage_errors_exit_2(tmp_path, capsys):
    assert main(["check", str(tmp_path / "absent.onnx")]) == 2
    assert "absent.onnx" in capsys.readouterr().err
    with pytest.raises(SystemExit) as raised:
        main(["check"])
    assert raised.value.code == 2
    with pytest.raises(SystemExit) as raised:
        main(["no-such-command"])
    assert raised.value.code == 2


def test_unparsable_file_is_invalid(tmp_path, capsys):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\xff\xff\xff\xff")
    assert main(["check", str(path)]) == 1
    assert "not a parsable ONNX model" in capsys.readouterr().err


@pytest.mark.slow
def test_console_script_help_and_module_entry_point(tmp_path):
    exe = shutil.which("onnx-struct")
    commands = [[sys.executable, "-m", "onnx_struct"]] + ([[exe]] if exe else [])
    for command in commands:
        result = subprocess.run([*command, "--help"], capture_output=True, text=True)
        assert result.returncode == 0 and "check" in result.stdout
        result = subprocess.run([*command, "check", write(tmp_path, 63)], capture_output=True, text=True)
        assert result.returncode == 1 and "payload is 63 bytes" in result.stderr


@pytest.mark.slow
def test_json_diagnostics_carry_code_and_details_in_a_subprocess(tmp_path):
    """The console script's --json report: every diagnostic has its code and details, beside the
    fields it had before (path, reason, message and the flattened details)."""
    path = tmp_path / "m.onnx"
    model = model_with(
        [linear_int4_128()],
        [S.make_struct_value("weight", 0, raw_data=bytes(63)), S.make_struct_value("weight", 5, raw_data=b"")],
    )
    onnx.save(model, path)
    result = subprocess.run(
        [sys.executable, "-m", "onnx_struct", "check", str(path), "--json"], capture_output=True, text=True
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["path"] == str(path) and report["valid"] is False
    by_path = {(d["path"], d["code"]): d for d in report["diagnostics"]}
    size = by_path[("graph.struct_initializer[0] ('weight')", "size_mismatch")]
    assert size["details"] == {"expected": 64, "actual": 63}
    assert (size["expected"], size["actual"]) == (64, 63)
    assert size["message"] == "graph.struct_initializer[0] ('weight'): payload is 63 bytes; the type requires 64"
    assert size["reason"] == "payload is 63 bytes; the type requires 64"
    assert by_path[("graph.struct_initializer[1] ('weight')", "duplicate_name")]["details"] == {}
    index = by_path[("graph.struct_initializer[1] ('weight').type", "unknown_type_index")]
    assert index["details"] == {"index": 5}
    assert all(set(d) >= {"path", "reason", "message", "code", "details"} for d in report["diagnostics"])

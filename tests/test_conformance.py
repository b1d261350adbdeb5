"""The conformance suite (onnx_struct/conformance, docs/conformance.md): every checker rule has a
valid and an invalid case, the suite regenerates byte-identical (the committed manifest is the
drift check), and each backend gets the results the docs state."""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pytest

pytest.importorskip("gguf")  # the GGUF decode cases' oracle
pytest.importorskip("onnxruntime")

from onnx_struct import conformance  # noqa: E402
from onnx_struct.cli import main  # noqa: E402
from onnx_struct.conformance import checker_cases, rules  # noqa: E402
from onnx_struct.conformance.runner import same_values  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMITTED_MANIFEST = ROOT / "tests" / "data" / "conformance-manifest.json"
DOC = ROOT / "docs" / "conformance.md"
# Formats onnxruntime has no kernel for (FLOAT4E2M1 and FLOAT6 casts): skipped, not failed.
ORT_UNSUPPORTED = {"decode/OCP_MXFP4", "decode/OCP_MXFP6_E2M3", "decode/OCP_MXFP6_E3M2"}


@pytest.fixture(scope="session")
def suite(tmp_path_factory) -> pathlib.Path:
    directory = tmp_path_factory.mktemp("conformance")
    conformance.export(directory)
    return directory


@pytest.fixture(scope="session")
def onnxruntime_results(suite):
    return conformance.run(suite, "onnxruntime")


# ---------------------------------------------------------------------- rules
def test_every_checker_rule_has_a_valid_and_an_invalid_case():
    invalid = {c.code for c in checker_cases.CASES if c.code is not None}
    valid = {c.rule for c in checker_cases.CASES if c.code is None}
    missing = sorted(set(rules.checker_rules()) - invalid)
    assert not missing, f"checker codes without an invalid case in onnx_struct/conformance/checker_cases.py: {missing}"
    assert not sorted(set(rules.checker_rules()) - valid)
    assert invalid <= set(rules.checker_rules()), "a case for a code the checker does not raise"


def test_codes_left_out_are_codes_the_checker_modules_raise():
    """An exclusion whose code no module of the checker raises any more is stale."""
    assert set(rules.NOT_FROM_A_MODEL_FILE) <= set(rules.raised_codes())


def test_the_rule_scan_follows_the_checker_imports():
    modules = rules.checker_modules()
    assert "onnx_struct.payload.values" in modules and "onnx_struct.layout.sizes" in modules
    assert "onnx_struct.runtime.codec" not in modules and "onnx_struct.llm" not in modules
    codes = rules.raised_codes()
    assert "onnx_struct.payload.values" in codes["size_mismatch"]
    assert "onnx_struct.errors" in codes["not_parsable"]  # a DEFAULT_CODE
    assert "bad_template" not in codes and "missing_leaf" not in codes  # chat templates, pack


def test_every_raise_in_the_checker_modules_names_a_code():
    """A ValidationError raised without a code gets the default "invalid", which the suite leaves
    out (NOT_FROM_A_MODEL_FILE): such a raise would be a rule without a case."""
    import ast

    bare = [
        f"{name}:{node.lineno}"
        for name, tree in rules.checker_modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", "")) == "ValidationError"
        and not any(k.arg in ("code", None) for k in node.keywords)  # code=..., or **details carrying it
    ]
    assert not bare, f"ValidationError raised without a code: {bare}"


def test_case_names_are_unique():
    names = [c.name for c in checker_cases.CASES]
    assert len(names) == len(set(names))


# ---------------------------------------------------------------------- the suite's bytes
def test_the_manifest_is_the_committed_one(suite):
    """The drift check: a change of behaviour is a change of the manifest. Regenerate with
    ``onnx-struct conformance export DIR && cp DIR/manifest.json tests/data/conformance-manifest.json``."""
    exported = (suite / "manifest.json").read_text()
    assert exported == COMMITTED_MANIFEST.read_text(), "the suite changed; see this test's docstring"


@pytest.mark.slow
def test_export_twice_is_byte_identical(suite, tmp_path):
    conformance.export(tmp_path)
    first = sorted(p.relative_to(suite) for p in suite.rglob("*") if p.is_file())
    second = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert first == second
    assert all((suite / p).read_bytes() == (tmp_path / p).read_bytes() for p in first)


def test_the_manifest_lists_every_file_with_its_digest(suite):
    manifest = json.loads((suite / "manifest.json").read_text())
    listed = {f"{c['id']}/{name}" for c in manifest["cases"] for name in c["files"]}
    on_disk = {str(p.relative_to(suite)) for p in suite.rglob("*") if p.is_file()} - {"manifest.json"}
    assert listed == on_disk
    assert manifest["suite_version"] == conformance.SUITE_VERSION


def test_the_suite_is_small(suite):
    total = sum(p.stat().st_size for p in suite.rglob("*") if p.is_file())
    assert total < 4 << 20, total


def test_every_kind_and_every_format_has_cases(suite):
    from onnx_struct import formats

    manifest = json.loads((suite / "manifest.json").read_text())
    kinds = {c["kind"] for c in manifest["cases"]}
    assert kinds == {"checker", "size", "view", "decode", "lowering"}
    assert {c["format"] for c in manifest["cases"] if c["kind"] == "decode"} == set(formats.names())


def test_decode_cases_use_onnx_backend_test_layout(suite):
    case = suite / "decode" / "Q4_0"
    assert (case / "model.onnx").is_file() and (case / "test_data_set_0" / "output_0.pb").is_file()
    assert (case / "test_data_set_0" / "input_0.pb").is_file()


# ---------------------------------------------------------------------- backends
def test_onnxruntime_backend_passes(onnxruntime_results):
    failed = [f"{r.id}: {r.message}" for r in onnxruntime_results if r.status == "failed"]
    assert not failed, "\n".join(failed)
    assert {r.id for r in onnxruntime_results if r.status == "skipped"} == ORT_UNSUPPORTED


def test_reference_backend_passes_decode_and_lowering(suite):
    results = conformance.run(suite, "reference", kinds={"decode", "lowering"})
    assert results and all(r.status == "passed" for r in results), [
        (r.id, r.message) for r in results if r.status != "passed"
    ]


def test_stock_checker_accepts_what_the_docs_say(suite):
    """docs/conformance.md's table: for each invalid checker case, whether stock onnx.checker
    accepts it (it cannot know the struct rules) - kept true by running it."""
    results = {r.id: r for r in conformance.run(suite, "stock", kinds={"checker"})}
    rows = dict(re.findall(r"^\| `([a-z0-9_]+_invalid)` \|.*\| (accepts|refuses) \|$", DOC.read_text(), re.M))
    invalid = [c.name for c in checker_cases.CASES if c.code is not None]
    assert sorted(rows) == sorted(invalid), "docs/conformance.md's stock table lists other cases"
    for name in invalid:
        accepted = results[f"checker/{name}"].message.startswith("accepted")
        assert rows[name] == ("accepts" if accepted else "refuses"), name


class LyingBackend:
    """Accepts every model; returns zeros; sizes and views empty: every case with an expectation fails."""

    def check(self, model_path):
        return None

    def run(self, model_path, inputs):
        import onnx

        model = onnx.load(str(model_path), load_external_data=False)
        return [np.zeros([d.dim_value for d in o.type.tensor_type.shape.dim], np.float32) for o in model.graph.output]


def test_a_wrong_backend_fails_the_cases(suite):
    results = conformance.run(suite, LyingBackend(), kinds={"checker", "decode"})
    invalid = {f"checker/{c.name}" for c in checker_cases.CASES if c.code is not None}
    failed = {r.id for r in results if r.status == "failed"}
    assert invalid <= failed
    assert {r.id for r in results if r.kind == "decode"} <= failed  # no format decodes to all zeros


def test_a_wrong_struct_runtime_fails_though_its_plain_runs_pass(suite):
    """run_struct is held to the same outputs: right plain results do not hide a wrong struct run."""

    class WrongStructRuntime(conformance.load_backend("reference").__class__):
        def run_struct(self, model_path, inputs):
            return [np.zeros((2, 64), np.float32)]

    results = conformance.run(suite, WrongStructRuntime(), kinds={"lowering"})
    assert {r.status for r in results} == {"failed"}
    assert all(r.message.startswith("struct_model.onnx output 0") for r in results), [r.message for r in results]


def test_a_checker_naming_another_code_or_path_fails(suite):
    from onnx_struct import ValidationError

    class WrongPath:
        def check(self, model_path):
            raise ValidationError("struct_types[99]", "wrong", code="size_mismatch")

    results = conformance.run(suite, WrongPath(), kinds={"checker"})
    by_id = {r.id: r for r in results}
    assert by_id["checker/payload_short_invalid"].message.startswith("path 'struct_types[99]'")
    assert by_id["checker/cyclic_reference_invalid"].message.startswith("code 'size_mismatch'")
    assert by_id["checker/cyclic_reference_valid"].status == "failed"


def test_a_changed_file_fails_its_case(suite, tmp_path):
    import shutil

    from onnx_struct.conformance import runner

    shutil.copytree(suite / "decode" / "Q8_0", tmp_path / "decode" / "Q8_0")
    (tmp_path / "decode" / "Q8_0" / "test_data_set_0" / "output_0.pb").write_bytes(b"")
    manifest = json.loads((suite / "manifest.json").read_text())
    (case,) = [c for c in manifest["cases"] if c["id"] == "decode/Q8_0"]
    result = runner.run_case(runner.ReferenceBackend(), tmp_path, case)
    assert result.status == "failed" and "not the file the manifest lists" in result.message


def test_module_callable_backend(suite, tmp_path, monkeypatch):
    """A backend of one's own by MODULE:CALLABLE: a class (instantiated) with only run()."""
    (tmp_path / "my_backend.py").write_text(
        "import onnx\n"
        "class Backend:\n"
        "    def run(self, model_path, inputs):\n"
        "        from onnx.reference import ReferenceEvaluator\n"
        "        evaluator = ReferenceEvaluator(str(model_path))\n"
        "        return evaluator.run(None, dict(zip(evaluator.input_names, inputs)))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    backend = conformance.load_backend("my_backend:Backend")
    assert type(backend).__name__ == "Backend"
    results = conformance.run(suite, backend, kinds={"lowering", "checker"})
    assert {r.status for r in results if r.kind == "lowering"} == {"passed"}
    assert {r.status for r in results if r.kind == "checker"} == {"skipped"}  # it has no check()
    with pytest.raises(ValueError, match="MODULE:CALLABLE"):
        conformance.load_backend("nothing")


def test_same_values_compares_bits_and_nan_positions():
    x = np.array([1.0, np.nan, -0.0], np.float32)
    assert same_values(x.copy(), x) == ""
    assert same_values(np.array([1.0, np.nan, 0.0], np.float32), x) != ""  # -0.0 is not 0.0
    assert same_values(np.array([1.0, 2.0, -0.0], np.float32), x) == "NaN positions differ"
    assert same_values(x[:2], x).startswith("shape")


# ---------------------------------------------------------------------- command line
def test_cli_run_json_and_exit_codes(suite, capsys):
    assert main(["conformance", "run", str(suite), "--kind", "size", "--kind", "view", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and {row["kind"] for row in report["summary"]} == {"size", "view"}
    assert main(["conformance", "run", str(suite), "--backend", "stock", "--kind", "checker"]) == 1
    out = capsys.readouterr().out
    assert "FAILED checker/payload_short_invalid: accepted a model breaking size_mismatch" in out
    assert main(["conformance", "run", str(suite), "--backend", "no.such.module:X"]) == 2


def test_cli_export(tmp_path, capsys, monkeypatch):
    from onnx_struct.conformance import writer

    monkeypatch.setattr(writer, "all_entries", lambda: writer.size_entries())  # the size cases only: fast
    assert main(["conformance", "export", str(tmp_path / "out")]) == 0
    assert "8 cases" in capsys.readouterr().out
    assert main(["conformance", "run", str(tmp_path / "out")]) == 0

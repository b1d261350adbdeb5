"""Running an exported suite against a backend, and the table of its results.

A backend is an object with any of ``check(model_path)`` (returns on a valid model, raises on an
invalid one; an error with ``code`` and ``path`` attributes is compared with them),
``size(model_path) -> {"struct_types[i]": bits}``, ``view(model_path, value_name) -> {leaf path:
array}`` and ``run(model_path, inputs) -> outputs`` (lists of numpy arrays in graph order), and for a
runtime with struct support ``run_struct(model_path, inputs)``, which decode and lowering cases then
also run on their ``struct_model.onnx``. A case
whose kind the backend has no method for is skipped; a backend raising :class:`Unsupported` skips
that case too (reported as such).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import pathlib

import numpy as np
import onnx

from onnx_struct.conformance.writer import MANIFEST, SUITE_VERSION

METHOD_OF_KIND = {"checker": "check", "size": "size", "view": "view", "decode": "run", "lowering": "run"}


class Unsupported(Exception):
    """The backend cannot run this case's model at all (e.g. onnxruntime has no kernel for an
    element type): the case is skipped, with this message, rather than failed."""


@dataclasses.dataclass
class Result:
    id: str
    kind: str
    rule: str
    status: str  # "passed", "failed", "skipped"
    message: str = ""


# ---------------------------------------------------------------------- backends
# onnxruntime's messages for an operator or element type it has no kernel for.
UNSUPPORTED_BY_ONNXRUNTIME = ("NOT_IMPLEMENTED", "is not currently registered or supported")


class OnnxStructBackend:
    """onnx_struct's checker, size function and views; onnxruntime runs the plain models."""

    name = "onnxruntime"

    def check(self, model_path):
        from onnx_struct.check.checker import check_model

        check_model(str(model_path))

    def size(self, model_path):
        from onnx_struct.layout.table import size_in_bits
        from onnx_struct.schema.model import get_struct_types, load

        declarations = get_struct_types(load(str(model_path)))
        return {f"struct_types[{i}]": size_in_bits(d, declarations) for i, d in enumerate(declarations)}

    def view(self, model_path, value_name):
        from onnx_struct.payload.view import view

        return dict(view(value_name, str(model_path)).leaves())

    def run(self, model_path, inputs):
        from onnx_struct.runtime.ort import load_onnxruntime

        ort = load_onnxruntime()
        options = ort.SessionOptions()
        options.log_severity_level = 3  # leaf initializers listed as inputs are meant: no warning each
        try:
            session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # noqa: BLE001 - onnxruntime's own classes
            if any(gap in str(error) for gap in UNSUPPORTED_BY_ONNXRUNTIME):  # a missing kernel, not a wrong result
                raise Unsupported(_first_line(error)) from None
            raise
        from onnx_struct.runtime.feeds import Feed

        names = [i.name for i in onnx.load(str(model_path), load_external_data=False).graph.input]
        # OrtValues of the ONNX element type: onnxruntime takes no ml_dtypes array (INT4, BFLOAT16, FLOAT8).
        feeds = {
            name: Feed(onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape, array=a).ort_value()
            for name, a in zip(names, inputs, strict=True)
        }
        return session.run(None, feeds)

    def run_struct(self, model_path, inputs):
        """The struct model itself, through onnx_struct.InferenceSession (check, lower, onnxruntime)."""
        from onnx_struct.runtime.session import InferenceSession

        try:
            session = InferenceSession(str(model_path))
        except Exception as error:  # noqa: BLE001 - onnxruntime's classes, as in run()
            if any(gap in str(error) for gap in UNSUPPORTED_BY_ONNXRUNTIME):
                raise Unsupported(_first_line(error)) from None
            raise
        names = [i.name for i in onnx.load(str(model_path), load_external_data=False).graph.input]
        return session.run(None, dict(zip(names, inputs, strict=True)))


class ReferenceBackend:
    """onnx's ReferenceEvaluator on the plain models (decode and lowering cases)."""

    name = "reference"

    def run(self, model_path, inputs):
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(str(model_path))
        with np.errstate(all="ignore"):  # NaN and inf scales are part of the cases
            return evaluator.run(None, dict(zip(evaluator.input_names, inputs, strict=True)))


class StockCheckerBackend:
    """Plain ``onnx.checker.check_model``: what stock onnx accepts of the checker cases."""

    name = "stock"

    def check(self, model_path):
        from onnx_struct import originals

        originals.check_model(str(model_path))  # stock's own, even while install() has replaced it


BACKENDS = {"onnxruntime": OnnxStructBackend, "reference": ReferenceBackend, "stock": StockCheckerBackend}


def load_backend(spec: str):
    """A backend by name (onnxruntime, reference, stock) or ``MODULE:CALLABLE`` (an object with the
    methods, or a class or function returning one).

    Args:
        spec: the name or ``MODULE:CALLABLE``.

    Returns:
        The backend object.

    Raises:
        ValueError: neither a known name nor ``MODULE:CALLABLE``.
        ImportError: the module does not import.
        AttributeError: the module has no such callable.
    """
    if spec in BACKENDS:
        return BACKENDS[spec]()
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} or MODULE:CALLABLE, not {spec!r}")
    target = getattr(importlib.import_module(module_name), attribute)
    if isinstance(target, type) or (callable(target) and not any(hasattr(target, m) for m in METHOD_OF_KIND.values())):
        target = target()  # a class, or a factory function
    return target


# ---------------------------------------------------------------------- running
def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def _read_tensor(path: pathlib.Path) -> np.ndarray:
    return onnx.numpy_helper.to_array(onnx.TensorProto.FromString(path.read_bytes()))


def same_values(actual, expected: np.ndarray) -> str:
    """ "" when ``actual`` has ``expected``'s shape and bits (NaNs: the same positions), else why."""
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"shape {actual.shape}, expected {expected.shape}"
    try:
        actual = actual.astype(expected.dtype)
    except (TypeError, ValueError):
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    if expected.dtype.kind == "f" or "float" in expected.dtype.name:
        nan = np.isnan(expected)
        if not np.array_equal(np.isnan(actual), nan):
            return "NaN positions differ"
        actual, expected = actual[~nan], expected[~nan]
    differ = np.flatnonzero(actual.reshape(-1).tobytes() != expected.reshape(-1).tobytes()) if actual.size else []
    if len(differ) and actual.tobytes() != expected.tobytes():
        diff = np.flatnonzero(actual.reshape(-1) != expected.reshape(-1))
        where = (
            f", first at {diff[0]}: {actual.reshape(-1)[diff[0]]} != {expected.reshape(-1)[diff[0]]}"
            if diff.size
            else ""
        )
        return f"{diff.size or 'some'} values differ{where}"
    return ""


def _check_case(backend, case_dir: pathlib.Path, expected: dict) -> str:
    try:
        backend.check(case_dir / "model.onnx")
    except Unsupported:
        raise
    except Exception as error:  # noqa: BLE001 - a backend's refusal is any exception
        if expected["valid"]:
            return f"refused a valid model: {_first_line(error)}"
        code, path = getattr(error, "code", None), getattr(error, "path", None)
        if isinstance(code, str) and code != expected["code"]:
            return f"code {code!r}, expected {expected['code']!r} ({_first_line(error)})"
        if isinstance(path, str) and path != expected["path"]:
            return f"path {path!r}, expected {expected['path']!r}"
        return ""
    return "" if expected["valid"] else f"accepted a model breaking {expected['code']} at {expected['path']!r}"


def _size_case(backend, case_dir, expected) -> str:
    sizes = backend.size(case_dir / "model.onnx")
    wrong = {k: sizes.get(k) for k, bits in expected["size_bits"].items() if sizes.get(k) != bits}
    return f"sizes {wrong}, expected {expected['size_bits']}" if wrong else ""


def _view_case(backend, case_dir, expected) -> str:
    leaves = backend.view(case_dir / "model.onnx", expected["value"])
    if set(leaves) != set(expected["leaves"]):
        return f"leaves {sorted(leaves)}, expected {sorted(expected['leaves'])}"
    for path, file in expected["leaves"].items():
        if why := same_values(leaves[path], _read_tensor(case_dir / file)):
            return f"leaf {path!r}: {why}"
    return ""


def _compare_outputs(outputs, expected: list[np.ndarray], which: str) -> str:
    if len(outputs) != len(expected):
        return f"{which}: {len(outputs)} outputs, expected {len(expected)}"
    for i, (actual, wanted) in enumerate(zip(outputs, expected, strict=True)):
        if why := same_values(actual, wanted):
            return f"{which} output {i}: {why}"
    return ""


def _run_case(backend, case_dir, files) -> str:
    data = case_dir / "test_data_set_0"
    count = {kind: sum(f.startswith(f"test_data_set_0/{kind}_") for f in files) for kind in ("input", "output")}
    tensors = [onnx.TensorProto.FromString((data / f"input_{i}.pb").read_bytes()) for i in range(count["input"])]
    inputs = [onnx.numpy_helper.to_array(t) for t in tensors]
    expected = [_read_tensor(data / f"output_{i}.pb") for i in range(count["output"])]
    if why := _compare_outputs(backend.run(case_dir / "model.onnx", inputs), expected, "model.onnx"):
        return why
    if hasattr(backend, "run_struct") and "struct_model.onnx" in files:
        # The struct model's own graph inputs (the plain model's also list the leaves, for decode cases).
        struct_model = onnx.load(str(case_dir / "struct_model.onnx"), load_external_data=False)
        by_name = {t.name: array for t, array in zip(tensors, inputs, strict=True)}
        struct_inputs = [by_name[i.name] for i in struct_model.graph.input]
        return _compare_outputs(
            backend.run_struct(case_dir / "struct_model.onnx", struct_inputs), expected, "struct_model.onnx"
        )
    return ""


def run_case(backend, root: pathlib.Path, case: dict) -> Result:
    """One case of the manifest against ``backend``."""
    rule = case.get("rule") or case.get("format") or ""
    result = Result(case["id"], case["kind"], rule, "passed")
    method = METHOD_OF_KIND[case["kind"]]
    if not hasattr(backend, method):
        result.status, result.message = "skipped", f"the backend has no {method}()"
        return result
    case_dir = root / case["id"]
    for relative, digest in case["files"].items():
        path = case_dir / relative
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            result.status, result.message = "failed", f"{relative}: missing or not the file the manifest lists"
            return result
    expected = json.loads((case_dir / "expected.json").read_text()) if "expected.json" in case["files"] else {}
    try:
        if case["kind"] == "checker":
            why = _check_case(backend, case_dir, expected)
        elif case["kind"] == "size":
            why = _size_case(backend, case_dir, expected)
        elif case["kind"] == "view":
            why = _view_case(backend, case_dir, expected)
        else:
            why = _run_case(backend, case_dir, case["files"])
    except Unsupported as error:
        result.status, result.message = "skipped", f"unsupported: {error}"
        return result
    except Exception as error:  # noqa: BLE001 - a backend's failure is a failed case, not a crash of the run
        why = f"raised {_first_line(error)}"
    if why:
        result.status, result.message = "failed", why
    return result


def run(directory: str | os.PathLike, backend="onnxruntime", *, kinds=None) -> list[Result]:
    """Run the suite in ``directory`` against ``backend``.

    Args:
        directory: an exported suite (:func:`onnx_struct.conformance.export`).
        backend: a backend object, or a name / ``MODULE:CALLABLE`` for :func:`load_backend`.
        kinds: only these kinds (default: every kind).

    Returns:
        One Result per case, in the manifest's order.

    Raises:
        OSError: no manifest in ``directory``.
        ValueError: the manifest's suite version is not this package's.
    """
    root = pathlib.Path(directory)
    manifest = json.loads((root / MANIFEST).read_text())
    if manifest.get("suite_version") != SUITE_VERSION:
        raise ValueError(f"suite version {manifest.get('suite_version')}, this package runs {SUITE_VERSION}")
    if isinstance(backend, str):
        backend = load_backend(backend)
    return [run_case(backend, root, case) for case in manifest["cases"] if kinds is None or case["kind"] in kinds]


def summary(results: list[Result]) -> list[dict]:
    """Rows (kind, rule or format, passed, failed, skipped), sorted by kind then rule."""
    rows: dict[tuple[str, str], dict] = {}
    for r in results:
        row = rows.setdefault(
            (r.kind, r.rule), {"kind": r.kind, "rule": r.rule, "passed": 0, "failed": 0, "skipped": 0}
        )
        row[r.status] += 1
    return [rows[k] for k in sorted(rows)]


def table(results: list[Result]) -> str:
    """The summary as a text table, failures listed below it."""
    rows = summary(results)
    width = max([len(r["rule"]) for r in rows] + [4])
    lines = [f"{'kind':<9} {'rule':<{width}} passed failed skipped"]
    lines += [f"{r['kind']:<9} {r['rule']:<{width}} {r['passed']:>6} {r['failed']:>6} {r['skipped']:>7}" for r in rows]
    totals = {s: sum(r[s] for r in rows) for s in ("passed", "failed", "skipped")}
    lines.append(f"{'total':<9} {'':<{width}} {totals['passed']:>6} {totals['failed']:>6} {totals['skipped']:>7}")
    lines += [f"FAILED {r.id}: {r.message}" for r in results if r.status == "failed"]
    lines += [
        f"skipped {r.id}: {r.message}" for r in results if r.status == "skipped" and r.message.startswith("unsupported")
    ]
    return "\n".join(lines)

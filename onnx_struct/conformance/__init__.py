"""A conformance suite for runtime authors: the proposal's checker rules, sizes, views, every
registered format's decoder and lowering, as plain protobuf files any runtime can run.

``export(dir)`` writes the suite (docs/conformance.md describes its layout); ``run(dir, backend=...)``
runs it against onnx_struct + onnxruntime, onnx's reference evaluator, stock onnx's checker or a
backend of your own.
"""

from __future__ import annotations

from onnx_struct.conformance.runner import Result, Unsupported, load_backend, run, summary, table
from onnx_struct.conformance.writer import SUITE_VERSION, export, suite_digest

__all__ = [
    "SUITE_VERSION",
    "Result",
    "Unsupported",
    "export",
    "load_backend",
    "run",
    "suite_digest",
    "summary",
    "table",
]

"""Export the conformance suite, or run it against a backend (docs/conformance.md).

  onnx-struct conformance export DIR
  onnx-struct conformance run DIR --backend onnxruntime
  onnx-struct conformance run DIR --backend reference        # decode and lowering cases
  onnx-struct conformance run DIR --backend stock            # what stock onnx.checker accepts
  onnx-struct conformance run DIR --backend mypkg.backend:Backend --json

`run` prints passed / failed / skipped per kind and rule (or format) and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import dataclasses

from onnx_struct.cli import EXIT_INVALID, EXIT_OK, UsageError, print_json

INPUT = "directory"
HELP = "export the conformance suite, or run it against a backend (exit 0 all passed, 1 a failure, 2 usage/I-O)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    export = actions.add_parser("export", help="write the suite into DIRECTORY")
    export.add_argument("directory", help="where to write it (created)")
    run = actions.add_parser("run", help="run the suite in DIRECTORY against a backend")
    run.add_argument("directory", help="an exported suite")
    run.add_argument(
        "--backend",
        default="onnxruntime",
        help="onnxruntime (onnx_struct's checker, views, onnxruntime; the default), reference (onnx's "
        "ReferenceEvaluator), stock (onnx.checker.check_model), or MODULE:CALLABLE: an object with "
        "check(model_path) and/or run(model_path, inputs) (also size, view; docs/conformance.md)",
    )
    run.add_argument("--kind", action="append", choices=("checker", "size", "view", "decode", "lowering"),
                     help="only cases of this kind (repeatable)")  # fmt: skip
    run.add_argument("--json", action="store_true", help="print the summary and every case's result as JSON")


def run(args: argparse.Namespace) -> int:
    from onnx_struct import conformance  # noqa: PLC0415 - the suite's generator loads gguf-py and the formats

    if args.action == "export":
        manifest = conformance.export(args.directory)
        print(f"{args.directory}: {len(manifest['cases'])} cases, suite version {manifest['suite_version']}")
        return EXIT_OK
    try:
        backend = conformance.load_backend(args.backend)
    except (ValueError, ImportError, AttributeError) as error:
        raise UsageError(f"--backend {args.backend}: {error}") from None
    try:
        results = conformance.run(args.directory, backend, kinds=set(args.kind) if args.kind else None)
    except ValueError as error:  # another suite version
        raise UsageError(str(error)) from None
    failed = any(r.status == "failed" for r in results)
    if args.json:
        print_json(
            {
                "directory": args.directory,
                "backend": args.backend,
                "passed": not failed,
                "summary": conformance.summary(results),
                "cases": [dataclasses.asdict(r) for r in results],
            }
        )
    else:
        print(conformance.table(results))
    return EXIT_INVALID if failed else EXIT_OK

"""Regenerate onnx_struct/_proto/ from schemas/onnx_struct.proto.

    python schemas/generate.py           # rewrite the bindings
    python schemas/generate.py --check   # exit 1 if the committed bindings differ (CI)

Uses protoc as bundled by grpcio-tools (pinned in the `dev` extra, so the output is reproducible)
and onnx's own onnx-ml.proto from the installed onnx package as the import root.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schemas" / "onnx_struct.proto"
OUT = ROOT / "onnx_struct" / "_proto"
GENERATED = ("onnx_struct_pb2.py", "onnx_struct_pb2.pyi")


def generate(out_dir: pathlib.Path) -> None:
    import onnx
    from grpc_tools import protoc

    onnx_root = pathlib.Path(onnx.__file__).resolve().parent.parent
    args = [
        "protoc",
        f"-I{SCHEMA.parent}",
        f"-I{onnx_root}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        str(SCHEMA),
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed bindings drift")
    options = parser.parse_args()
    if not options.check:
        generate(OUT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(pathlib.Path(tmp))
        stale = [n for n in GENERATED if (pathlib.Path(tmp) / n).read_bytes() != (OUT / n).read_bytes()]
    if stale:
        print(f"generated bindings are stale: {stale}; run python schemas/generate.py", file=sys.stderr)
        return 1
    print("generated bindings are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())

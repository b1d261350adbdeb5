"""Convert a GGUF file into an ONNX model whose struct values are its tensors (bytes verbatim).

With --graph the model also gets the decoder graph of its architecture (docs/llm.md lists the
families), ready for `onnx-struct generate`; --ctx-size builds it for fewer positions; --genai DIR also
writes the folder onnxruntime-genai runs (`onnx-struct export genai`). With --reference the model points into the .gguf (external_data) instead of copying its tensors;
the .gguf must then be in OUT's directory (or below it), where the model looks for it. The model
is checked (onnx_struct.check_model, external payloads resolved from OUT's directory) before it is
written: nothing is written that `onnx-struct check` would reject.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import TextIO

from onnx_struct.check.checker import check_model
from onnx_struct.cli import EXIT_OK, UsageError
from onnx_struct.cli.output import write_output
from onnx_struct.convert import convert
from onnx_struct.payload.external import require_regular_file

INPUT = "input"
HELP = "convert a .gguf file to an ONNX model with struct values (exit 0 ok, 1 invalid, 2 usage/I-O)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="the .gguf file")
    parser.add_argument("output", help="the .onnx file to write")
    parser.add_argument(
        "--reference", action="store_true", help="reference the tensor bytes inside the .gguf instead of copying them"
    )
    parser.add_argument(
        "--keep-unknown", action="store_true", help="keep tensors of unknown GGML types as raw UINT8 arrays"
    )
    parser.add_argument(
        "--graph",
        action="store_true",
        help="also build the decoder graph of the file's architecture: input_ids -> logits with a KV cache",
    )
    parser.add_argument(
        "--ctx-size",
        type=int,
        metavar="N",
        help="with --graph: build for N positions (at most the file's context_length), as llama.cpp's --ctx-size",
    )
    parser.add_argument(
        "--all-logits",
        action="store_true",
        help="with --graph: logits for every position (as for a perplexity), not only the last one generation reads",
    )
    parser.add_argument(
        "--genai",
        metavar="DIR",
        help="with --graph: also write DIR, a folder onnxruntime-genai loads (as `onnx-struct export genai OUT DIR`)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


class ProgressBar:
    """A plain-text progress bar on a terminal stream; silent when the stream is not a TTY."""

    def __init__(self, stream: TextIO, enabled: bool = True, width: int = 30) -> None:
        self.stream = stream
        self.enabled = enabled and stream.isatty()
        self.width = width
        self.shown = False
        self.last = (0, 0)

    def __call__(self, done: int, total: int, label: str) -> None:
        if not self.enabled:
            return
        if total == 0:  # a stage before the tensor count is known (opening the file): no bar yet
            line = f"{label[: self.width + 50]:<{self.width + 50}}"
        else:
            filled = self.width * done // total
            line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {label[:40]:<40}"
        self.stream.write(f"\r{line}")
        self.stream.flush()
        self.shown = True
        self.last = (done, total)

    def stage(self, label: str) -> None:
        """Show ``label`` on the bar after the last tensor: serializing, checking and writing a
        large model take a noticeable time once every tensor is read."""
        if self.shown:
            self(*self.last, label)

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def run(args: argparse.Namespace) -> int:
    if args.ctx_size is not None and not args.graph:
        print("onnx-struct from-gguf: --ctx-size needs --graph", file=sys.stderr)
        return 2
    if args.all_logits and not args.graph:
        print("onnx-struct from-gguf: --all-logits needs --graph", file=sys.stderr)
        return 2
    if args.genai is not None and not args.graph:
        print("onnx-struct from-gguf: --genai needs --graph", file=sys.stderr)
        return 2
    if args.ctx_size is not None and args.ctx_size <= 0:
        print(f"onnx-struct from-gguf: --ctx-size must be a positive integer, not {args.ctx_size}", file=sys.stderr)
        return 2
    output = pathlib.Path(args.output)
    bar = ProgressBar(sys.stderr, enabled=not args.quiet)
    try:
        require_regular_file(args.input)  # gguf-py opens it itself: a FIFO would block it forever
        model = convert(
            args.input,
            reference=args.reference,
            keep_unknown=args.keep_unknown,
            model_dir=output.parent if args.reference else None,
            progress=bar,
            graph=args.graph,
            context_length=args.ctx_size,
            all_logits=args.all_logits,
        )
        bar.stage("serializing")
        data = model.SerializeToString()
        del model
        bar.stage("checking")
        check_model(data, base_dir=output.parent)
        bar.stage(f"writing {output.name}")
        write_output(output, lambda handle: handle.write(data), inputs=[args.input])
        bar.stage("done")
    except ImportError as error:
        if error.name != "gguf":  # only the optional dependency's absence is the user's to fix
            raise
        raise UsageError(str(error)) from None
    finally:
        bar.close()
    if not args.quiet:
        mode = "referencing" if args.reference else "copying"
        print(f"{output}: {len(data)} bytes, {mode} the tensors of {args.input}", file=sys.stderr)
    if args.genai is not None:
        from onnx_struct.convert.genai import export_genai  # noqa: PLC0415 - on use

        written = export_genai(output, args.genai)
        if not args.quiet:
            print(f"{args.genai}: {', '.join(p.name for p in written)}", file=sys.stderr)
    return EXIT_OK

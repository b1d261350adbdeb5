"""Generate text with a model built by `onnx-struct from-gguf IN.gguf OUT.onnx --graph`.

The prompt is tokenized with the GGUF file's own tokenizer (kept in the model's metadata); the
new text streams to stdout as it is generated, and the speed goes to stderr (--quiet: not).
Greedy by default; --temperature above 0 samples, with --top-k, --top-p and --seed.

    onnx-struct from-gguf model.gguf model.onnx --graph --reference
    onnx-struct generate model.onnx --prompt "Once upon a time" --max-new-tokens 40
"""

from __future__ import annotations

import argparse
import os
import sys

from onnx_struct import limits
from onnx_struct.cli import EXIT_OK, UsageError
from onnx_struct.errors import ValidationError

INPUT = "model"
HELP = "generate text with a decoder model from `from-gguf --graph` (exit 0 ok, 1 invalid model, 2 usage/I-O)"


CACHE_ENV = "ONNX_STRUCT_CACHE_DIR"
EXIT_BROKEN_PIPE = 141  # as a shell reports a process ended by SIGPIPE (`... | head -1`)


def require_stdout() -> None:
    """Refuse a closed stdout (``>&-``: Python's ``sys.stdout`` is None) before any work, and make
    characters its encoding lacks (``PYTHONIOENCODING=ascii``) print as '?' instead of a traceback.

    Raises:
        UsageError: stdout is closed.
    """
    if sys.stdout is None:
        raise UsageError("standard output is closed: nothing to write the text to")
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")


def stdout_gone() -> int:
    """The reader of stdout went away (``| head -1``): no message, no traceback, exit 141 as
    after SIGPIPE. Stdout is pointed at /dev/null so that the interpreter's last flush of what
    is still buffered does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def option_error(error: ValidationError, option: str) -> UsageError:
    """A refused argument as the usage error of its option: ``generate(top_k)`` is ``--top-k``,
    ``chat(ctx_size)`` ``--ctx-size``; a text the tokenizer refuses (``encode(text)``, a lone
    surrogate from bytes that are not UTF-8 on the command line) is ``option``'s."""
    name = error.path.partition("(")[2].partition(")")[0]
    flag = option if error.path.startswith("encode(") else "--" + name.replace("_", "-")
    return UsageError(f"{flag}: {error.reason}")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``generate`` and ``chat`` share: sampling, threads, accuracy level."""
    parser.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy; above 0: sample")
    parser.add_argument("--top-k", type=int, default=0, help="sample among the k most probable tokens (0: all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="sample among tokens reaching probability p")
    parser.add_argument("--seed", type=int, default=None, help="the sampling's random seed")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime's intra-op thread count")
    parser.add_argument(
        "--accuracy-level",
        type=int,
        choices=(0, 1, 2, 3, 4),
        default=None,
        help="MatMulNBits' accuracy level (default onnxruntime's, 4: int8 activations; 0: float32)",
    )
    parser.add_argument(
        "--cache-dir",
        default=os.environ.get(CACHE_ENV) or None,
        metavar="DIR",
        help=f"keep what onnxruntime loads (its optimized graph and weights) in DIR, so that the next start over "
        f"the same files skips the check and the repack (default: ${CACHE_ENV}, else none; 1.1-2.2x the .gguf "
        f"per model)",
    )


def check_sampling_options(args: argparse.Namespace) -> None:
    """``check_sampling`` on the options ``add_sampling_arguments`` gave (before a model loads)."""
    from onnx_struct.llm.generation import check_sampling  # noqa: PLC0415 - numpy on use only

    check_sampling(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx model (from-gguf --graph)")
    parser.add_argument("--prompt", required=True, help="the text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="at most this many new tokens (default 64)")
    add_sampling_arguments(parser)
    parser.add_argument("--quiet", action="store_true", help="no speed report on stderr")


def run(args: argparse.Namespace) -> int:
    if args.threads is not None and not 1 <= args.threads <= limits.MAX_INTRA_OP_THREADS:
        raise UsageError(f"--threads must be from 1 to {limits.MAX_INTRA_OP_THREADS}")
    require_stdout()
    try:
        return _generate(args)
    except BrokenPipeError:
        return stdout_gone()


def _generate(args: argparse.Namespace) -> int:
    try:
        from onnx_struct.llm.generate import generate  # noqa: PLC0415 - onnxruntime on use only

        check_sampling_options(args)

        def stream(piece: str) -> None:
            sys.stdout.write(piece)
            sys.stdout.flush()

        result = generate(
            args.model,
            args.prompt,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
            stream=stream,
            threads=args.threads,
            accuracy_level=args.accuracy_level,
            cache_dir=args.cache_dir,
        )
    except ImportError as error:
        if error.name != "tokenizers":
            raise
        raise UsageError(str(error)) from None
    except ValidationError as error:
        if error.code == "bad_argument" and error.path.startswith(("generate(", "encode(")):
            raise option_error(error, "--prompt") from None
        raise
    sys.stdout.write("\n")
    if not args.quiet:
        n = len(result.tokens)
        prompt_rate = len(result.prompt_tokens) / result.prompt_seconds if result.prompt_seconds else 0.0
        rate = n / result.generation_seconds if result.generation_seconds else 0.0
        end = {"eog": "an end-of-generation token", "max_new_tokens": "max-new-tokens"}.get(
            result.stop_reason, result.stop_reason
        )
        print(
            f"{len(result.prompt_tokens)} prompt tokens at {prompt_rate:.1f} tok/s; "
            f"{n} new tokens at {rate:.1f} tok/s (stopped at {end})",
            file=sys.stderr,
        )
    return EXIT_OK

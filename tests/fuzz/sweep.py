"""A deterministic sweep beside the fuzzer: every string field of each model, one at a time, made
non-UTF-8, through a target.

    python tests/fuzz/sweep.py --target lower [--corpus DIR] [--models 40] [--seed 0]

proto2 hands such a string to Python as ``bytes``; libFuzzer reaches one field of one model at a
time, and found the places where that escaped one in a few hundred thousand inputs. The sweep tries
them all on the models it is given: the seeds (tests/fuzz/seeds.py), or a sample of a campaign's
corpus (``--corpus``). Every variant keeps its string's length, so only the bytes change. Escapes are
printed and saved as replayable cases under tests/fuzz/findings/<target>/; exit 1 if any.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [str(HERE.parent), str(HERE.parent.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

from google.protobuf.descriptor import FieldDescriptor  # noqa: E402

from fuzz.cases import Case  # noqa: E402
from fuzz.generate import build_case  # noqa: E402
from fuzz.seeds import model_seeds  # noqa: E402
from fuzz.targets import TARGETS, is_accepted  # noqa: E402
from onnx_struct._proto import pb  # noqa: E402 - the overlay: the struct parts are swept too

MARK = "\x01SWEEP\x01"
BAD = b"\xff\xfe" + b"\xc3" * (len(MARK.encode()) - 2)  # as long as MARK, not UTF-8
MODEL = pb.ModelProto


def string_fields(message, path: str = "") -> Iterator[tuple[str, object, str, int | None]]:
    """(path, message, field name, index or None) of every set string field below ``message``."""
    for field, value in message.ListFields():
        here = f"{path}.{field.name}" if path else field.name
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            items = value if field.is_repeated else [value]
            for i, item in enumerate(items):
                yield from string_fields(item, f"{here}[{i}]" if field.is_repeated else here)
        elif field.type == FieldDescriptor.TYPE_STRING and not isinstance(value, bytes):
            for i in range(len(value)) if field.is_repeated else [None]:
                yield here if i is None else f"{here}[{i}]", message, field.name, i


def variants(model: bytes) -> Iterator[tuple[str, bytes]]:
    """(field path, model bytes) with one string field's bytes made non-UTF-8, for each field."""
    try:
        parsed = MODEL.FromString(model)
    except Exception:  # noqa: BLE001 - not a model protobuf parses: nothing to sweep
        return
    for where, message, name, index in list(string_fields(parsed)):  # one parse, each field set and restored
        field = getattr(message, name) if index is not None else None
        original = field[index] if field is not None else getattr(message, name)
        if field is not None:
            field[index] = MARK
        else:
            setattr(message, name, MARK)
        yield where, parsed.SerializeToString().replace(MARK.encode(), BAD)
        if field is not None:
            field[index] = original
        else:
            setattr(message, name, original)


class _Hang(Exception):
    pass


def _alarm(*_) -> None:
    raise _Hang


def sweep(target: str, cases: list[Case], *, timeout: int = 30, save: Path | None = None) -> list[str]:
    """Run every variant of every case through ``target``; the escapes (one per exception class and
    raising function), described in a line each."""
    run = TARGETS[target]
    escapes: dict[tuple[str, str], str] = {}
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for n, case in enumerate(cases):
                for where, data in variants(case.model):
                    variant = Case(data, case.files, case.value, case.full_check, case.value_leaves_dir)
                    path = variant.write(Path(scratch) / "case")
                    signal.alarm(timeout)
                    try:
                        run(variant, path)
                    except _Hang:
                        escapes.setdefault(("timeout", where), f"case {n} {where}: ran over {timeout} s")
                    except Exception as error:  # noqa: BLE001 - the acceptance rule decides
                        if not is_accepted(error):
                            key = (type(error).__name__, traceback.extract_tb(error.__traceback__)[-1].name)
                            if key not in escapes:
                                escapes[key] = f"case {n} {where}: {type(error).__name__}: {str(error)[:200]}"
                                if save is not None:
                                    variant.save(save / target / f"escape-sweep-{len(escapes)}", target, None)
                    finally:
                        signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return list(escapes.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, choices=[t for t in TARGETS if t != "from_gguf"])
    parser.add_argument("--corpus", type=Path, help="a campaign's corpus directory (default: the seeds)")
    parser.add_argument("--models", type=int, default=40, help="how many corpus models to sample")
    parser.add_argument("--seed", type=int, default=0, help="the sample's random seed")
    args = parser.parse_args()
    if args.corpus is None:
        inputs = model_seeds()
    else:
        inputs = [p.read_bytes() for p in sorted(args.corpus.iterdir())]
        random.Random(args.seed).shuffle(inputs)
    cases = [build_case(data) for data in inputs]
    cases = [c for c in cases if any(True for _ in variants(c.model))][: args.models]
    escapes = sweep(args.target, cases, save=HERE / "findings")
    for line in escapes:
        print(f"ESCAPE {args.target} {line}")
    print(f"{args.target}: {len(cases)} models, {len(escapes)} escapes")
    return 1 if escapes else 0


if __name__ == "__main__":
    sys.exit(main())

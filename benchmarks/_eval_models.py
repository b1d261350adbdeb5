"""Real models from PyPI packages quantized with ``quantize_with_report``: per-layer errors and
end-task agreement (``python benchmarks/eval_quantize.py --models``).

* magika (a CNN: one Conv, two MatMul, Google's file-type classifier): the content-type label of
  real files (the Python standard library's and this repository's, a mix of code, text, JSON,
  binaries), float model against quantized, run through magika's own pipeline with its
  onnxruntime session swapped for ``onnx_struct.InferenceSession``.
* silero-vad (a sequence model: an STFT Conv, four Conv encoders and an LSTM, every weight a
  Constant inside If branches): the speech probability of each 32 ms chunk of a synthetic
  16 kHz signal (voiced, vowel-like bursts between noise), the state carried from chunk to chunk.
  Its LSTM weights are not a quantize op type; its Conv kernels are (on request: ``--op-types``).
* RapidOCR's text recognizer (CNN + MatMul): the CTC character index per time step on a
  synthetic text-line image (dark strokes on light paper).

Each package is looked up installed (``pip install --no-deps magika silero-vad
rapidocr-onnxruntime``: only the .onnx files are read); a missing one is skipped with a message.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import onnx
from eval_quantize import package_file  # the one lookup of a file shipped in an installed package

VARIANTS = (  # (format, op types)
    ("Q8_0", ("MatMul", "Gemm")),
    ("Q4_0", ("MatMul", "Gemm")),
    ("Q8_0", ("MatMul", "Gemm", "Conv")),
    ("Q4_0", ("MatMul", "Gemm", "Conv")),
)


def _session(model: onnx.ModelProto):
    import onnxruntime as ort  # noqa: PLC0415

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _quantized_session(model: onnx.ModelProto):
    import onnx_struct  # noqa: PLC0415

    return onnx_struct.InferenceSession(model)


def layer_summary(report) -> str:
    """Per-layer errors of a report in one cell: count, median, worst (and its op), warnings."""
    errors = sorted((w.error, w.op_type, w.name) for w in report.quantized)
    if not errors:
        return "0 weights"
    worst = errors[-1]
    return (
        f"{len(errors)} weights, median {np.median([e for e, _, _ in errors]):.2%}, worst {worst[0]:.2%} "
        f"({worst[1]}), {sum(w.warning for w in report.quantized)} above {report.threshold:.0%}"
    )


def magika_rows(quantize_with_report) -> list[str]:
    path = package_file("magika", "standard_v3_3/model.onnx")
    if path is None:
        return ["magika: skipped (pip install --no-deps magika)"]
    from magika import Magika  # noqa: PLC0415

    files = sorted(p for p in pathlib.Path(np.__file__).parents[1].glob("*/*") if p.is_file())[::7][:300]
    files += sorted(p for p in pathlib.Path(__file__).parents[1].rglob("*") if p.is_file() and ".git" not in p.parts)
    magika = Magika()
    labels = [r.output.label for r in magika.identify_paths(files)]
    rows = []
    source = onnx.load(path)
    for fmt, ops in VARIANTS:
        quantized, report = quantize_with_report(source, fmt, op_types=ops, min_elements=1024)
        magika._onnx_session = _quantized_session(quantized)
        got = [r.output.label for r in magika.identify_paths(files)]
        agree = sum(a == b for a, b in zip(labels, got, strict=True))
        rows.append(
            f"| magika (CNN) | {fmt} {'+'.join(ops)} | {layer_summary(report)} | "
            f"{agree}/{len(files)} file labels agree | {_outputs(report)} |"
        )
    return rows


def _outputs(report) -> str:
    return ", ".join(f"{k} {v:.2%}" for k, v in report.output_errors.items()) or "-"


def speechlike(seconds: float = 4.0, rate: int = 16000) -> np.ndarray:
    """Vowel-like bursts (a 120 Hz pulse train through three formant resonances, 4 Hz syllables)
    alternating with quiet noise: something a VAD has to decide on."""
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * rate)) / rate
    pulses = (np.sin(2 * np.pi * 120 * t) > 0.95).astype(np.float64)
    voiced = sum(
        np.convolve(pulses, np.exp(-t[:400] * 600) * np.sin(2 * np.pi * f * t[:400]), "same") for f in (700, 1200, 2600)
    )
    envelope = np.clip(np.sin(2 * np.pi * 4 * t), 0, None) * (np.sin(2 * np.pi * 0.25 * t) > 0)
    signal = voiced * envelope / np.abs(voiced).max() * 0.5 + rng.standard_normal(t.size) * 0.01
    return signal.astype(np.float32)


def _vad(run, audio: np.ndarray) -> np.ndarray:
    state = np.zeros((2, 1, 128), np.float32)
    probs, context = [], np.zeros(64, np.float32)
    for start in range(0, audio.size - 511, 512):
        chunk = np.concatenate([context, audio[start : start + 512]])[None]
        prob, state = run({"input": chunk, "state": state, "sr": np.array(16000, np.int64)})
        context = chunk[0, -64:]
        probs.append(float(np.asarray(prob).ravel()[0]))
    return np.array(probs)


def silero_rows(quantize_with_report) -> list[str]:
    path = package_file("silero-vad", "data/silero_vad.onnx")
    if path is None:
        return ["silero-vad: skipped (pip install --no-deps silero-vad)"]
    source = onnx.load(path)
    audio = speechlike()
    reference = _session(source)
    want = _vad(lambda feeds: reference.run(None, feeds), audio)
    # the report's calibration input: one chunk of the signal with its context, as _vad feeds it
    calibration = {"input": audio[None, 8000 : 8000 + 576], "state": np.zeros((2, 1, 128), np.float32)}
    calibration["sr"] = np.array(16000, np.int64)
    rows = []
    for fmt, ops in VARIANTS:
        quantized, report = quantize_with_report(source, fmt, op_types=ops, min_elements=1024, calibration=calibration)
        session = _quantized_session(quantized)
        got = _vad(lambda feeds, s=session: s.run(None, feeds), audio)
        agree = int(np.sum((got > 0.5) == (want > 0.5)))
        rows.append(
            f"| silero-vad (sequence) | {fmt} {'+'.join(ops)} | {layer_summary(report)} | "
            f"{agree}/{want.size} chunk decisions agree (speech in {int(np.sum(want > 0.5))}), "
            f"max prob diff {np.abs(got - want).max():.3f} | {_outputs(report)} |"
        )
    return rows


def text_line(width: int = 320) -> np.ndarray:
    """A 48 x ``width`` RGB image, normalized as RapidOCR feeds its recognizer, with dark vertical
    and diagonal strokes grouped like characters on light paper."""
    rng = np.random.default_rng(1)
    image = np.ones((48, width), np.float32)
    x = 8
    while x < width - 16:
        for _ in range(rng.integers(1, 4)):
            kind, h0 = rng.integers(0, 3), rng.integers(10, 16)
            if kind == 0:
                image[h0 : 48 - h0, x : x + 2] = 0
            elif kind == 1:
                image[h0 : h0 + 2, x : x + 8] = 0
            else:
                for k in range(48 - 2 * h0):
                    image[h0 + k, x + k // 3 : x + k // 3 + 2] = 0
            x += rng.integers(3, 7)
        x += rng.integers(6, 12)
    return np.repeat(((image - 0.5) / 0.5)[None, None], 3, axis=1)


def rapidocr_rows(quantize_with_report) -> list[str]:
    path = package_file("rapidocr-onnxruntime", "ch_PP-OCRv4_rec_infer.onnx")
    if path is None:
        return ["rapidocr: skipped (pip install --no-deps rapidocr-onnxruntime)"]
    source = onnx.load(path)
    x = text_line()
    feeds = {source.graph.input[0].name: x}
    want = _session(source).run(None, feeds)[0].argmax(-1).ravel()
    rows = []
    for fmt, ops in VARIANTS:
        quantized, report = quantize_with_report(source, fmt, op_types=ops, min_elements=1024, calibration=feeds)
        got = _quantized_session(quantized).run(None, feeds)[0].argmax(-1).ravel()
        rows.append(
            f"| RapidOCR rec (CNN + MatMul) | {fmt} {'+'.join(ops)} | {layer_summary(report)} | "
            f"{int(np.sum(got == want))}/{want.size} CTC steps agree | {_outputs(report)} |"
        )
    return rows


def main() -> int:
    from onnx_struct.passes.quantize_report import quantize_with_report  # noqa: PLC0415

    print("| model | variant | per-layer error (quantize report) | end task | model output error |")
    print("|---|---|---|---|---|")
    for rows in (magika_rows, silero_rows, rapidocr_rows):
        for row in rows(quantize_with_report):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

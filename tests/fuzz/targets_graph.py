"""Structured fuzz target for the decoder graph's metadata and tensor table
(``onnx_struct.llm.graph.plan_decoder``): every family's tiny test file (tests/support/families/),
its metadata and tensor shapes mutated a few fields at a time with hostile values; only
ValidationError may come out, and an accepted plan must hold what onnxruntime needs (positive,
float32-nonzero scales and softcaps, int32 windows and counts, head sizes of a multiple of 16,
RoPE dims it can rotate), since onnxruntime takes a softcap or scale of 0 as "none"/"default".

    python tests/fuzz/targets_graph.py 1000000 [SEED]     # a campaign; prints the escapes
"""

from __future__ import annotations

import math
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnx_struct import ValidationError  # noqa: E402
from onnx_struct.llm.graph import plan_decoder  # noqa: E402
from onnx_struct.llm.graph.keys import FLOAT32_MAX, INT32_MAX  # noqa: E402

HOSTILE = [
    0, 1, -1, 2, 3, 16, 24, 255, 256, 2**31 - 1, 2**31, 2**63 - 1, 2**64, -(2**63),
    0.0, -0.0, 1e-46, 1e-300, 5e-324, 1.4e-45, 0.5, 1.0, 3.4e38, 3.5e38, 1e300, math.nan, math.inf, -math.inf,
    True, False, "", "x", "4", "linear", "yarn", "none", [], [True], [False], [0], [1, 0], [True] * 600,
    [1.5], ["a"], [[True]], None,
]  # fmt: skip
FAMILY_KEYS = [
    "block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length", "attention.layer_norm_rms_epsilon",
    "rope.freq_base", "rope.freq_base_swa", "rope.dimension_count", "rope.scaling.type", "rope.scaling.factor",
    "rope.scaling.original_context_length", "rope.scaling.attn_factor", "rope.scaling.finetuned",
    "attention.sliding_window", "attention.sliding_window_pattern", "attn_logit_softcapping",
    "final_logit_softcapping", "embedding_scale", "residual_scale", "attention.scale", "logit_scale", "expert_count",
]  # fmt: skip
ARCHITECTURES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "granite", "olmo2",
                 "smollm3", "qwen3moe", "gpt2"]  # fmt: skip
SEED_CASES = ["gemma3-swa", "gemma2-defaults", "gemma", "qwen3-untied", "smollm3-gqa", "olmo2-swa-array",
              "granite-defaults-f32", "phi3-longrope-long-f32", "phi3-mini-f32"]  # fmt: skip


def seeds() -> list[tuple[dict, dict]]:
    """(metadata, tensors) of each family's test file, read back as from-gguf reads them."""
    from gguf import GGUFReader
    from support.family_cases import CASES

    from onnx_struct.llm.tokenizer.gguf_metadata import read_gguf_metadata

    out = []
    with tempfile.TemporaryDirectory() as directory:
        for name in SEED_CASES:
            module, config = CASES[name]
            path = Path(directory) / f"{name}.gguf"
            module.write_gguf(path, config)
            tensors = {
                t.name: (t.tensor_type.name, tuple(int(d) for d in reversed(t.shape.tolist())))
                for t in GGUFReader(str(path)).tensors
            }
            metadata = {k: v for k, v in read_gguf_metadata(path).items() if not k.startswith("tokenizer.")}
            out.append((metadata, tensors))
    return out


def mutate(rng: random.Random, metadata: dict, tensors: dict) -> tuple[dict, dict]:
    metadata, tensors = dict(metadata), dict(tensors)
    arch = metadata["general.architecture"]
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        if kind < 0.55:
            key = f"{arch}.{rng.choice(FAMILY_KEYS)}"
            value = rng.choice(HOSTILE)
            if value is None:
                metadata.pop(key, None)
            else:
                metadata[key] = value
        elif kind < 0.65:
            arch = rng.choice(ARCHITECTURES)
            metadata = {
                k.replace(metadata["general.architecture"] + ".", arch + ".", 1): v for k, v in metadata.items()
            }
            metadata["general.architecture"] = arch
        elif kind < 0.85 and tensors:
            name = rng.choice(sorted(tensors))
            ggml, shape = tensors[name]
            choice = rng.random()
            if choice < 0.3:
                del tensors[name]
            elif choice < 0.6 and shape:
                dims = list(shape)
                dims[rng.randrange(len(dims))] = rng.choice([0, 1, dims[0] + 1, 2 * dims[-1], 16])
                tensors[name] = (ggml, tuple(dims))
            else:
                tensors[name] = (ggml, shape[::-1] if rng.random() < 0.5 else shape[:1])
        else:
            extra = rng.choice(["blk.0.attn_qkv.weight", "output.weight", "rope_freqs.weight", "blk.0.attn_q.bias",
                                "rope_factors_short.weight", "blk.1.post_ffw_norm.weight", "blk.0.ffn_gate_inp.weight"])  # fmt: skip
            tensors[extra] = ("F32", rng.choice([(16,), (256,), (768, 256), (96, 256)]))
    return metadata, tensors


def _float32_positive(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and 0 < value <= FLOAT32_MAX and np.float32(value) > 0)


def check_plan(plan) -> None:
    """What an accepted plan must hold for onnxruntime to compute what llama.cpp does."""
    hp, block = plan.hp, plan.block
    assert hp.head_dim % 16 == 0 and 0 < hp.n_kv_heads <= hp.n_heads and hp.n_heads % hp.n_kv_heads == 0
    assert len(block.layers) == hp.n_layers
    for value in (block.attention_scale, block.embedding_scale, block.residual_scale, block.logit_scale,
                  block.attn_softcap, block.final_softcap, hp.rms_eps):  # fmt: skip
        assert _float32_positive(value), value
    for layer in block.layers:
        assert layer.window is None or 0 < layer.window <= INT32_MAX
        if layer.rope is not None:
            dims = layer.rope.dims or hp.head_dim
            assert dims % 16 == 0 and dims <= hp.head_dim
            assert _float32_positive(layer.rope.base) and _float32_positive(layer.rope.scale)
            assert _float32_positive(layer.rope.attn_factor)


def fuzz_one(metadata: dict, tensors: dict) -> bool:
    """Plan the graph; True if accepted. Raises anything but ValidationError (an escape)."""
    try:
        plan = plan_decoder(metadata, tensors)
    except ValidationError:
        return False
    check_plan(plan)
    return True


def campaign(runs: int, seed: int = 0) -> tuple[int, list[str]]:
    """(accepted count, escapes as messages) over ``runs`` mutated inputs."""
    rng = random.Random(seed)
    corpus = seeds()
    accepted, escapes = 0, []
    for _ in range(runs):
        metadata, tensors = mutate(rng, *rng.choice(corpus))
        try:
            accepted += fuzz_one(metadata, tensors)
        except Exception as error:  # noqa: BLE001 - an escape is what this looks for
            escapes.append(f"{type(error).__name__}: {error} <- {sorted(metadata.items())!r:.600} {tensors!r:.300}")
    return accepted, escapes


if __name__ == "__main__":
    start = time.perf_counter()
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    accepted, escapes = campaign(runs, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(f"{runs} inputs, {accepted} accepted, {len(escapes)} escapes in {time.perf_counter() - start:.0f} s")
    for line in dict.fromkeys(e.split(" <- ")[0] for e in escapes):
        print(" ", line)
    for line in escapes[:5]:
        print(line)

"""The decoder families, one module per architecture; each states only how its block differs from
llama's (``block(keys, hp, tensors) -> Block``). Adding a family: its module, its line in MODULES,
its tests, its row in docs/llm.md."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from onnx_struct.llm.graph.families import (
    gemma,
    gemma2,
    gemma3,
    granite,
    llama,
    olmo2,
    phi3,
    qwen2,
    qwen3,
    smollm3,
)
from onnx_struct.llm.graph.keys import Keys
from onnx_struct.llm.graph.spec import MOE_KERNEL, Block, Hyperparameters, Tensors

MODULES = (llama, qwen2, gemma, gemma2, gemma3, qwen3, phi3, granite, olmo2, smollm3)
BlockReader = Callable[[Keys, Hyperparameters, Tensors], Block]
FAMILIES: dict[str, BlockReader] = {arch: module.block for module in MODULES for arch in module.ARCHITECTURES}

# Architectures llama.cpp reads whose graph is close to a supported one (for the refusal's hint).
NEAREST = {
    "qwen3moe": "qwen3", "qwen2moe": "qwen2", "mixtral": "llama", "olmoe": "olmo2", "olmo": "olmo2",
    "olmo3": "olmo2", "gemma3n": "gemma3", "gemma-embedding": "gemma3", "phi2": "phi3", "phimoe": "phi3",
    "granitemoe": "granite", "granitehybrid": "granite", "llama4": "llama", "deci": "llama", "smollm": "llama",
    "qwen2vl": "qwen2", "mistral3": "mistral", "starcoder2": "llama", "internlm2": "llama", "exaone": "llama",
}  # fmt: skip


MIXTURES_OF_EXPERTS = {"qwen3moe", "qwen2moe", "olmoe", "phimoe", "granitemoe", "llama4", "mixtral"}


def nearest_supported(arch: object) -> str:
    """`` (nearest supported: X)`` for a refused architecture (with why, for a mixture of
    experts), or ``""``."""
    if not isinstance(arch, str):
        return ""
    near = NEAREST.get(arch) or next(iter(difflib.get_close_matches(arch, list(FAMILIES), n=1, cutoff=0.6)), None)
    if arch in MIXTURES_OF_EXPERTS:
        return f" (a mixture of experts: {MOE_KERNEL}; nearest dense family: {near})"
    return f" (nearest supported: {near})" if near else ""

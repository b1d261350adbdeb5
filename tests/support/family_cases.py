"""Every family's test configs (tests/support/families/), by name, with the module that writes
and computes them: the oracle side of tests/test_llm_families.py and its llama.cpp comparison."""

from __future__ import annotations

import types

from support.families import gemma, granite, olmo2, phi3, qwen3, smollm3

MODULES = (gemma, qwen3, smollm3, olmo2, granite, phi3)
CASES: dict[str, tuple[types.ModuleType, object]] = {
    name: (module, config) for module in MODULES for name, config in module.CONFIGS.items()
}
# Deep or slow configs run in the slow tier only.
SLOW = {name for name, (_, config) in CASES.items() if config.n_layers > 6}


def f32(name: str) -> bool:
    config = CASES[name][1]
    return config.default_type == "F32" and not config.types

"""Per-family tiny GGUF writers and independent float64 oracles (one module per architecture)."""

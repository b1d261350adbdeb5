"""Per-family tiny GGUF writers and independent float64 oracles written from llama.cpp's graphs."""

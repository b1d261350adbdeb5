"""Chat: a GGUF file's chat template rendered as transformers and llama-cpp-python render it."""

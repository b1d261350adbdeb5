"""Large language models from GGUF files: tokenizers (:mod:`onnx_struct.llm.tokenizer`) and chat
templates (:mod:`onnx_struct.llm.chat`). No onnxruntime is imported here."""

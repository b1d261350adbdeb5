"""Struct models to stock ONNX: decoder calls and leaf initializers. Never imports onnxruntime."""

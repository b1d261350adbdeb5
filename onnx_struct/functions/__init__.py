"""Decoders and encoders as ONNX functions: function models, leaf bindings and the decoder safety policy."""

"""The proposal's rules, the decoder safety policy, logical-type inference and the onnx.checker hooks."""

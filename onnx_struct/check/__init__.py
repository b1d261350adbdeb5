"""The proposal's rules, logical-type inference and the onnx.checker hooks."""

"""The only layer that imports onnxruntime (lazily): runners, decode/encode, block ranges, sessions."""

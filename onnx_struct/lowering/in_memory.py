"""The external-data location of an initializer whose array is handed to onnxruntime in memory:
what the lowering writes (lowering/execution/emit.py) and the runtime recognises
(runtime/weights_file.py). A module of its own, so that a cached start, which only recognises
it, does not import the lowering."""

IN_MEMORY_LOCATION = "onnx_struct.in_memory"

"""The decoder graph of a GGUF file (``convert(path, graph=True)``): spec.py (the shared
hyperparameters and the Block a family states), keys.py (typed metadata reads), tensors.py (the
tensors a block reads), blocks.py (norms, RoPE tables, attention, MLPs), decoder.py (the
assembly), families/ (one module per architecture)."""

from onnx_struct.llm.graph.decoder import DecoderPlan, add_decoder_graph, plan_decoder
from onnx_struct.llm.graph.families import FAMILIES

__all__ = ["FAMILIES", "DecoderPlan", "add_decoder_graph", "plan_decoder"]

"""The building blocks every family's graph is made of: RMSNorm, linear layers on GGUF weights,
RoPE tables, grouped-query attention (onnxruntime's ``com.microsoft`` GroupQueryAttention with its
KV cache, rotary, window and softcap), gated MLPs, scales and softcaps. No onnxruntime import here."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_struct.llm.graph.spec import Hyperparameters, Layer, Rope

MS_DOMAIN = "com.microsoft"
SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))


class GraphBuilder:
    """Nodes and initializers of one graph, with unique names per call site."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._constants: dict[tuple, str] = {}
        self._rope_tables: dict[Rope, tuple[str, str]] = {}
        self.activations: set[str] = set()  # the inputs of linear(): [batch, seq, width]

    def op(self, op_type: str, inputs: list[str], name: str, outputs: int = 1, domain: str = "", **attrs) -> list[str]:
        names = [name] if outputs == 1 else [f"{name}/{k}" for k in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=name, domain=domain, **attrs))
        return names

    def one(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        return self.op(op_type, inputs, name, **attrs)[0]

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def scalar(self, value: float) -> str:
        """A float32 scalar constant, one initializer per value."""
        value = float(np.float32(value))
        key = ("f32", value)
        if key not in self._constants:
            self._constants[key] = self.const(f"const/f32_{len(self._constants)}", np.array(value, np.float32))
        return self._constants[key]

    def ints(self, *values: int) -> str:
        key = ("i64", values)
        if key not in self._constants:
            self._constants[key] = self.const(f"const/i64_{len(self._constants)}", np.array(values, np.int64))
        return self._constants[key]

    def rms_norm(self, x: str, weight: str, name: str, eps: float) -> str:
        # ggml_rms_norm then the weight: x / sqrt(mean(x^2) + eps) * w, in the pattern onnxruntime
        # fuses into SimplifiedLayerNormalization (at any rank: q/k norms run on [b, s, heads, d]).
        square = self.one("Pow", [x, self.scalar(2.0)], f"{name}/pow")
        mean = self.one("ReduceMean", [square, self.ints(-1)], f"{name}/mean", keepdims=1)
        root = self.one("Sqrt", [self.one("Add", [mean, self.scalar(eps)], f"{name}/add_eps")], f"{name}/sqrt")
        return self.one("Mul", [self.one("Div", [x, root], f"{name}/div"), weight], f"{name}/scale")

    def head_norm(self, x: str, weight: str, name: str, eps: float, head_dim: int) -> str:
        """RMSNorm of each head of x [b, s, heads * d] (qwen3, gemma3's q/k norms)."""
        heads = self.one("Reshape", [x, self.ints(0, 0, -1, head_dim)], f"{name}/heads")
        return self.one("Reshape", [self.rms_norm(heads, weight, name, eps), self.ints(0, 0, -1)], f"{name}/flat")

    def linear(self, x: str, weight: str, name: str, bias: str | None = None) -> str:
        # MatMul(x, Transpose(W)) with W [out, in] as GGUF stores it: lowering turns this pattern
        # into MatMulNBits on the GGUF codes (docs/execution.md).
        self.activations.add(x)  # [batch, seq, width]: declared rank 3 (decoder.py)
        product = self.one("MatMul", [x, self.one("Transpose", [weight], f"{name}/wt", perm=[1, 0])], name)
        return self.one("Add", [product, bias], f"{name}/bias") if bias else product

    def mul(self, x: str, factor: float | None, name: str) -> str:
        return x if factor is None else self.one("Mul", [x, self.scalar(factor)], name)

    def softcap(self, x: str, cap: float | None, name: str) -> str:
        """cap * tanh(x / cap) (gemma2's final logits)."""
        if cap is None:
            return x
        inner = self.one("Tanh", [self.one("Div", [x, self.scalar(cap)], f"{name}/div")], f"{name}/tanh")
        return self.one("Mul", [inner, self.scalar(cap)], f"{name}/mul")

    def split(self, x: str, sizes: list[int], name: str) -> list[str]:
        return self.op("Split", [x, self.ints(*sizes)], name, outputs=len(sizes), axis=-1)

    def activation(self, x: str, kind: str, name: str) -> str:
        if kind == "silu":
            return self.one("Mul", [x, self.one("Sigmoid", [x], f"{name}/sigmoid")], f"{name}/silu")
        # gelu_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), ONNX Gelu from opset 20
        if self.opset >= 20:
            return self.one("Gelu", [x], f"{name}/gelu", approximate="tanh")
        return self.one("FastGelu", [x], f"{name}/gelu", domain=MS_DOMAIN)

    def rope_tables(self, hp: Hyperparameters, rope: Rope) -> tuple[str, str]:
        """cos/sin [context_length, dims / 2] of ``position * inverse frequency`` (constant inputs
        only, so onnxruntime folds them at session creation); one pair per distinct Rope."""
        if rope in self._rope_tables:
            return self._rope_tables[rope]
        tag = f"rope{len(self._rope_tables)}"
        dims = rope.dims or hp.head_dim
        exponents = np.arange(0, dims, 2, dtype=np.float64) / dims
        inverse = self.const(f"{tag}/inverse_frequencies", (rope.scale * rope.base**-exponents).astype(np.float32))
        if rope.factors:  # per-pair divisors (Llama 3.1's rope_freqs, phi3's long/short factors)
            inverse = self.one("Div", [inverse, rope.factors], f"{tag}/scaled_frequencies")
        if not self._rope_tables:  # the tables' length, which generation reads (llm/generation.py ROPE_LENGTH)
            self.const("rope/length", np.array(float(hp.context_length), np.float32))
        positions = self.one("Range", [self.scalar(0.0), "rope/length", self.scalar(1.0)], f"{tag}/positions")
        column = self.one("Unsqueeze", [positions, self.ints(1)], f"{tag}/column")
        angles = self.one("Mul", [column, inverse], f"{tag}/angles")
        cos, sin = self.one("Cos", [angles], f"{tag}/cos"), self.one("Sin", [angles], f"{tag}/sin")
        if rope.attn_factor != 1.0:  # LongRoPE's mscale multiplies both
            cos = self.mul(cos, rope.attn_factor, f"{tag}/cos_scaled")
            sin = self.mul(sin, rope.attn_factor, f"{tag}/sin_scaled")
        self._rope_tables[rope] = (cos, sin)
        return cos, sin

    def attention(
        self,
        hp: Hyperparameters,
        layer: Layer,
        qkv: tuple[str, str, str],
        cache: tuple[str, str, str, str],
        lengths: tuple[str, str],
        name: str,
        scale: float,
        softcap: float | None,
    ) -> str:
        """GroupQueryAttention over q [b, s, heads * d], k/v [b, s, kv_heads * d] and the past
        cache; writes the present cache. Its window rule (a query at p sees keys p - W < j <= p)
        is llama.cpp's SWA rule with W = n_swa; its softcap is cap * tanh(scale * q.k / cap)
        before the mask (docs/llm.md)."""
        past_k, past_v, present_k, present_v = cache
        inputs = [*qkv, past_k, past_v, *lengths]
        attrs = {"num_heads": hp.n_heads, "kv_num_heads": hp.n_kv_heads, "scale": scale}
        if layer.rope is not None:
            inputs += list(self.rope_tables(hp, layer.rope))
            attrs.update(do_rotary=1, rotary_interleaved=0 if layer.rope.neox else 1)
        if layer.window is not None:
            attrs["local_window_size"] = layer.window
        if softcap is not None:
            attrs["softcap"] = softcap
        self.nodes.append(
            helper.make_node(
                "GroupQueryAttention", inputs, [name, present_k, present_v], name=name, domain=MS_DOMAIN, **attrs
            )
        )
        return name

"""The KV cache of a decoder session: the tokens it holds, grown as they come, rewound to a prefix.

One float32 buffer per layer and kind, ``[1, n_kv_heads, capacity, head_dim]``, bound with
io_binding as both ``past_key_values.{i}.*`` and ``present.{i}.*``: GroupQueryAttention writes the
new positions into it in place (its shared-buffer mode) and nothing is copied per token;
``attention_mask`` is ``[1, positions so far]``, from which the graph derives where the past ends.
So keeping a prefix of the cache is only setting how many tokens it holds: the next run writes its
keys and values from there on, over whatever followed.

The buffers start small and double (copying the used positions) up to ``limit``, so that a chat
with a model of 8,192 positions does not hold the whole context's cache (SmolLM2-135M: 377 MiB)
for a short conversation; past half the limit they grow to it at once (one copy, not two).
"""

from __future__ import annotations

import numpy as np

from onnx_struct.errors import ValidationError
from onnx_struct.runtime.ort import load_onnxruntime

INITIAL_CAPACITY = 256  # positions of the first buffers (grown by doubling)
PREFILL_CHUNK = 512  # tokens per run while prefilling: the logits of a run are [1, n, n_vocab]


class KVCache:
    """The cache of one generation or chat: ``tokens`` are the ids whose keys and values it holds.

    Args:
        generator: the :class:`~onnx_struct.llm.generation.Generator` (session and layout).
        limit: the most positions it may hold (the context size).
    """

    def __init__(self, generator, limit: int) -> None:
        self.session = generator.session
        self.n_layers, self.n_kv_heads, self.head_dim = generator.n_layers, generator.n_kv_heads, generator.head_dim
        self.limit = limit
        self.tokens: list[int] = []
        self.runs = 0  # model runs so far
        self.run_tokens = 0  # tokens given to the model so far (a test counts the prefill with it)
        self._ort = load_onnxruntime()
        self._buffers: list[np.ndarray] = []
        self.binding = self.session.io_binding()
        self.binding.bind_output("logits")  # first: get_outputs() lists the outputs in binding order
        self._allocate(min(limit, INITIAL_CAPACITY))

    @property
    def capacity(self) -> int:
        """Positions the buffers hold now (grown on demand up to ``limit``)."""
        return self._buffers[0].shape[2]

    def keep(self, n: int) -> None:
        """Keep the first ``n`` tokens only (the next run continues after them)."""
        del self.tokens[n:]

    def run(self, ids: list[int]) -> np.ndarray:
        """Append ``ids`` and return the logits of the last one.

        Raises:
            ValidationError: (``context_full``) the cache would hold more than ``limit`` tokens.
        """
        total = len(self.tokens) + len(ids)
        if total > self.limit:
            raise ValidationError(
                "generate(context)",
                f"the context is full: {len(self.tokens)} tokens held + {len(ids)} new exceed its "
                f"{self.limit} positions",
                code="context_full",
            )
        if total > self.capacity:
            self._grow(total)
        logits = None
        for start in range(0, len(ids), PREFILL_CHUNK):
            chunk = ids[start : start + PREFILL_CHUNK]
            logits = self._run(chunk)
            # Counted only once the run is done: an interrupt (Ctrl-C) before leaves the cache as it was.
            self.tokens.extend(chunk)
        return logits

    def _run(self, ids: list[int]) -> np.ndarray:
        self.binding.bind_cpu_input("input_ids", np.asarray([ids], np.int64))
        self.binding.bind_cpu_input("attention_mask", np.ones((1, len(self.tokens) + len(ids)), np.int64))
        self.binding.bind_output("logits")
        self.session.run_with_iobinding(self.binding)
        self.runs += 1
        self.run_tokens += len(ids)
        return self.binding.get_outputs()[0].numpy()[0, -1]

    def _grow(self, needed: int) -> None:
        capacity = self.capacity
        while capacity < needed:
            capacity *= 2
        # Grown past half the limit, a buffer is grown to the limit: the next doubling would be cut
        # to it anyway, and each growth copies the cache and holds both copies for a moment (a
        # 2,048-token prompt then a 33rd new token of a 2,080-position generation grew twice).
        self._allocate(self.limit if capacity * 2 > self.limit else capacity)

    def _allocate(self, capacity: int) -> None:
        """Bind new buffers of ``capacity`` positions, holding the used positions of the old ones."""
        used = len(self.tokens)
        old = self._buffers
        self._buffers = []
        shape = (1, self.n_kv_heads, capacity, self.head_dim)
        for i in range(self.n_layers):
            for j, kind in enumerate(("key", "value")):
                buffer = np.zeros(shape, np.float32)
                if old:
                    buffer[:, :, :used] = old[2 * i + j][:, :, :used]
                self._buffers.append(buffer)  # kept alive: the OrtValue shares its memory
                value = self._ort.OrtValue.ortvalue_from_numpy(buffer)
                self.binding.bind_ortvalue_input(f"past_key_values.{i}.{kind}", value)
                self.binding.bind_ortvalue_output(f"present.{i}.{kind}", value)

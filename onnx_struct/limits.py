"""Every limit that protects onnx_struct from hostile or oversized input, in one place.

Each number bounds time or memory that a model's author could otherwise make us spend: nothing is
allocated, enumerated or run from a count a model states until the count is checked here (or
against bytes that really exist), and what a process keeps between calls (caches, free buffers)
is capped here too. ``docs/security.md`` gives the reason for each one; a limit changed here is
changed there (tests/test_layers.py checks both, and that no ``MAX_*`` is declared elsewhere).
Working-set sizes, how much of an accepted input is processed at a time (row ranges, encoder
chunks), stay beside the algorithm they tune.
"""

from __future__ import annotations

# The protobuf wire limit: a serialized message (so a model without external data) is < 2 GiB.
PROTOBUF_LIMIT = 2**31 - 1
# quantize writes a result of at least this many bytes (estimated before encoding) with its payloads
# and large tensors in OUT.data, appended as they are encoded: 16 MiB below the wire limit, for
# the estimate's margin (the skeleton's own fields).
INLINE_RESULT_LIMIT = 2**31 - 2**24

# Leaves of one concrete root (tensor fields, components, constants; not elements). Only reachable
# beyond a few hundred through reference fan-out, which would otherwise be enumerated exponentially.
MAX_LEAVES = 100_000

# Widest bit-packing component (the widest fixed-width ONNX scalar is 64 bits).
MAX_COMPONENT_BITS = 64

# Characters in all leaf paths of one concrete root (each path is its field and component names
# joined by '.'). Enumerating a root's leaves builds these strings; a chain of declarations with
# long names, or fan-out under a deep chain, would otherwise make them quadratic in the model.
MAX_LEAF_PATH_CHARS = 4_000_000

# Dimensions of one leaf (enclosing arrays, bit-packing records, tensor dims): numpy's limit.
MAX_LEAF_RANK = 64

# A leaf's dimensions multiplied (a zero one counted as 1) times its element's bytes in numpy:
# numpy refuses any larger shape, even an empty one, so a leaf past this could not be returned.
MAX_LEAF_SPAN = 2**63 - 1

# Messages: leaf paths a LeafShape keeps as a sample for messages, and the characters of each (a
# model's names are unbounded; a message is not).
MAX_SAMPLE_PATHS = 5
MAX_SAMPLE_PATH_CHARS = 80

# Declaration-level names the lowered model repeats once per value (a leaf path in each value's
# leaf names, a decoder's name in each call node) are shortened past this many characters, so the
# lowered model's size does not multiply a name's length by the number of values.
MAX_LOWERED_NAME_CHARS = 256

# Inline payloads a converted GGUF file may hold in total: above this the model could not be
# serialized (protobuf messages are limited to 2 GiB); 16 MiB are left for the rest of the model.
GGUF_INLINE_LIMIT = 2**31 - 2**24

# Nodes described per declaration tree; references past this are not expanded (exponential
# fan-out through shared references is legal, printing it is not useful). A whole description
# stops expanding at MAX_DESCRIBED_NODES, so N declarations that each reach a long chain cost
# O(N), not O(N * MAX_DESCRIBED_TREE_NODES).
MAX_DESCRIBED_TREE_NODES = 2000
# References expanded below one another; deeper ones are not (nesting depth is unbounded, and the
# tree is built recursively, three Python frames per level).
MAX_DESCRIBED_DEPTH = 64
# Rows of a layout diagram (``inspect --svg``); the rows past it are summarized, not drawn.
MAX_SVG_ROWS = 64

# Nodes of all declaration trees in one description (``describe`` / ``onnx-struct inspect``):
# each tree expands references up to 2000 nodes, so N declarations reaching one long chain would
# otherwise print N * 2000 nodes. Past this, trees show their root only, marked not expanded.
MAX_DESCRIBED_NODES = 20_000

# Bytes pack/encode may zero-fill beyond the bytes of the leaf arrays they are given (omitted
# leaves, padding): the payload is allocated from a declaration's size, which alone proves nothing.
MAX_PACK_ZERO_FILL_BYTES = 256 << 20

# ---------------------------------------------------------------------- decoders and encoders
# (docs/security.md, "Decoder safety policy")
# Results of the policy's size analysis kept, keyed by the function, its input types and
# constants: a model with many declarations of one format and shape (or decode calls on many
# values) analyzes it once.
POLICY_CACHE_SIZE = 256
# Nodes of one decoder or encoder. The registered decoders use at most ~100, the K-quant encoders
# up to ~3,900 (Q4_K: ggml's 22 candidate scales unrolled); one run of the policy's
# static analysis (onnx's inference) is linear in this, so it bounds the time check_model spends
# per function together with MAX_SHAPE_FOLD_ROUNDS.
MAX_FUNCTION_NODES = 4096

# Runs of onnx's inference that folding Shape/Size values into constants may take for one function:
# each round folds the Shape/Size nodes whose inputs' shapes the previous round made static, so a
# chain of N Shape -> Reshape pairs would take N rounds (docs/security.md). The registered formats
# need at most 2.
MAX_SHAPE_FOLD_ROUNDS = 16

# Bytes of the constants written inside one decoder or encoder (Constant nodes and other tensor
# attributes), counted from their dims, not from the bytes present. Codebooks belong in constant
# leaves of the declaration; the registered formats' functions hold at most a few KiB.
MAX_FUNCTION_CONSTANT_BYTES = 16 << 20

# What a decoder may allocate and compute: the bytes of all its values (inputs, constants, every
# intermediate and its output, all with static shapes; each is written once, so this also bounds
# the work) plus one unit per MatMul multiply-add must not exceed FUNCTION_EXPANSION bytes per
# byte of its inputs (payload and constant leaves; for an encoder also the leaves it writes) plus
# FUNCTION_BASE_BYTES. The registered formats need at most 87x at 4096 x 4096 (IQ1_S: 1.56 bits
# per element decoded to float32 is 20x by the output alone; TQ1_0 73x, IQ1_M 78x), plus lookup
# tables of about 2 MiB at small shapes; a Loop, a 4 GiB ConstantOfShape or a broadcast outer
# product of the payload cannot pass.
FUNCTION_EXPANSION = 256
# An encoder's factor instead (encoders run only on a caller's own arrays, in encode and quantize):
# the K-quant encoders replay ggml's scale searches, 16 to 22 candidate scales per weight, each a
# few float32 tensors the size of the input; Q4_K needs about 430x (4-byte inputs), Q5_K 370x.
ENCODER_EXPANSION = 1024
FUNCTION_BASE_BYTES = 64 << 20

# Elements onnx's data propagation may see when a decoder's shapes are not static from shapes
# alone (a Reshape to a shape computed with Gather/Concat): onnx keeps ~210 bytes per element of
# every 1-D tensor it propagates (2.1 GB for one INT4[10^7] leaf), so it only runs when all 1-D
# values of the decoder together have at most this many elements.
MAX_DATA_PROPAGATION_ELEMENTS = 1 << 16
# Digits of an external_data offset/length: uint64 has at most 20 decimal digits. Longer text is
# refused before int() (Python's own limit of 4300 digits raises ValueError; below it int() of
# long text costs quadratic time).
MAX_EXTERNAL_DIGITS = 20
# GGUF input (checked by onnx_struct.formats.gguf.validate before gguf-py's GGUFReader runs).
# Tensors per GGUF file: real models hold about 300 to 1,200 (DeepSeek-V3: ~1,100); gguf-py
# spends Python objects per tensor, and each becomes a struct value.
MAX_GGUF_TENSORS = 65_536
# Dimensions per GGUF tensor: ggml's GGML_MAX_DIMS.
MAX_GGUF_DIMS = 4
# Nesting of GGUF metadata arrays: llama.cpp reads no nested arrays at all, and gguf-py recurses
# once per level (5,000 levels exhaust Python's stack).
MAX_GGUF_ARRAY_DEPTH = 4
# Metadata values of one GGUF file (key-value pairs plus array elements at every depth): gguf-py
# builds one numpy array per element (memory and time per item: docs/benchmarks.md). Real tokenizers hold up to
# about 800,000 (Gemma 3: 3 x 262,144; Llama 3: 537,000).
MAX_GGUF_METADATA_ITEMS = 2**21
# general.alignment to_gguf writes (a recorded one is a model's word): the writer pads every tensor
# up to it, and gguf-py builds each padding as a Python list of that many zeros. Files use 32 (the
# default) to 4,096 (a page).
MAX_GGUF_ALIGNMENT = 2**16

# Bytes a calibration .npz (quantize --calibration) may inflate to, all entries together: a deflated
# entry of zeros inflates about 1,000-fold, and numpy inflates an entry whole. The inputs are run
# through the float model in one batch; real calibration batches are tens of MiB.
MAX_CALIBRATION_BYTES = 2**31
# Bytes of quantize's random calibration inputs, made from the inputs' declared shapes (float64
# samples before the cast): a model may declare 10^9 x 256. Real inputs of one batch are far below it.
MAX_RANDOM_CALIBRATION_BYTES = 1 << 30

# What a model's record of a referenced file (payload/file_identity.py) makes each check read of
# it: the bytes before its first range (a GGUF header; up to 32 MiB) and both ends of each range.
# 300 tensors of a GGUF sample about 2.4 MiB besides the header; a record asking more is refused.
MAX_IDENTITY_SAMPLE_BYTES = 64 << 20
MAX_IDENTITY_SAMPLES = 2 * MAX_GGUF_TENSORS + 1

# ---------------------------------------------------------------------- running decoders
# Decoder sessions kept alive at once; each holds its function model's kernels and arena, so the
# bound keeps memory flat when many distinct formats or shapes are decoded.
SESSION_CACHE_SIZE = 32
# Dimensions of a decoder's final Reshape that the runner applies itself (numpy's limit); a
# Reshape with more is left to onnxruntime, which reports it.
MAX_RESHAPE_RANK = 64
# onnxruntime threads generate(threads=N) asks for: onnxruntime starts its whole intra-op pool when
# the session is created, and 10^6 threads crashed the process (SIGSEGV under a 3,000-process limit).
MAX_INTRA_OP_THREADS = 1024
# Threads a big value is decoded on, whatever the core count.
MAX_DECODE_THREADS = 8
# Free output buffers kept for reuse, in bytes (beyond that the least recently returned are
# dropped): eight 64 MB outputs. Memory a process holds for nothing visible, so bounded, and
# dropped by runtime.clear_cache(). The block-range sessions' own arenas are range-sized, so a
# process keeps far less after a decode than a whole-tensor session's arena did
# (docs/benchmarks.md).
MAX_FREE_BUFFER_BYTES = 512 << 20
# InferenceSession copies the model's other external tensors into its weights file only while
# they are not much more than the weights (this many bytes beyond them): onnxruntime reads a large
# float table (or a sparse file a hostile model names) better from where it is, through the
# in-memory route.
EXTERNAL_COPY_ALLOWANCE = 256 << 20
# Positions of a decoder's context (``{arch}.context_length``, from-gguf --graph and generate): the
# graph folds cos/sin tables of context_length x head_dim float32 when the session is created.
# Released llama/mistral/qwen2 models train up to about 2^20 positions (Qwen2.5-1M); 2^40 asked
# for a 4 TiB table.
MAX_CONTEXT_LENGTH = 2**24
# Bytes of a decoder graph's cos/sin tables (context_length x head_dim float32 together, summed
# over its distinct RoPEs: gemma3's windowed and global layers have one each; from-gguf --graph),
# folded when its session is created: Qwen2.5-1M (2^20 positions, head size 128)
# needs 512 MiB; 2^24 positions at head size 128 would be 8 GiB.
MAX_ROPE_TABLE_BYTES = 2**30
# Characters one ``Tokenizer.encode`` call tokenizes (16 Mi): the work is linear in them (the
# special-token partition, the regex split, the merges of each word), this bounds one call's time
# and memory (a few seconds per million characters).
MAX_TOKENIZE_CHARS = 2**24
# Steps per character a WPM, UGM or RWKV session may spend on one fragment (plus a fixed slack of
# 2^16; a step is one piece lookup, about 0.1 µs, and one more per 16 bytes it hashes): at each
# position they try every piece length sharing its first bytes, so a vocabulary of 2,000 lengths
# under one prefix made 16,000 characters take 19 s; llama.cpp's bert-bge file tries at most 18
# lengths of at most 19 characters (about 30 steps), gemma-3's pieces under U+2581 about 80. At
# the bound a hostile vocabulary costs about 10 s per million characters, linear in the text.
MAX_TOKENIZE_STEPS_PER_CHAR = 256
# Chat templates (onnx_struct.llm.chat): a template comes with the file, so it is hostile input.
# Jinja's sandbox stops attribute escapes but bounds neither loops nor output. Characters of one
# template's text (the largest of llama.cpp's 70 real templates has about 16,700; compiling
# costs about 10 µs a character).
MAX_TEMPLATE_CHARS = 200_000
# Steps of one rendering: loop iterations, calls, attribute and item lookups, intercepted
# operators, pieces of output, plus one per 1,024 characters or elements a call returns or reads.
# llama.cpp's 70 real templates take at most 1,760 on the tests' conversations (up to 5 turns), and
# 366,650 on a 400-turn one of 930,000 characters (Reka-Edge, which concatenates the whole prompt per turn).
MAX_TEMPLATE_STEPS = 1_000_000
# Characters of one rendering's result (a 128k-token context is about 500,000 characters).
MAX_TEMPLATE_OUTPUT_CHARS = 4_000_000
# Characters a template writes in total, its macros' and {% set %} blocks' buffered output too
# (a macro's text is counted once where it is written and again where the caller prints it: Kimi-K3
# writes 3.3 million characters for a 930,000-character conversation).
MAX_TEMPLATE_EMITTED_CHARS = 32_000_000
# Size of any one value a template builds (characters of a string, elements of a list or dict
# counted through nested containers): string multiplication, joins and concatenation are checked
# against it before the value is built.
MAX_TEMPLATE_VALUE_SIZE = 4_000_000
# Bits of an integer a template computes (``10**10**10`` would take hours).
MAX_TEMPLATE_INT_BITS = 4096
# tojson(indent=N): real templates indent by 2 or 4; each level of nesting repeats the indent.
MAX_TEMPLATE_JSON_INDENT = 64
# Nesting of the data a template is given (messages, tools, extra variables: lists and dicts in
# lists and dicts): a message holding itself, or nested 100,000 deep, overflowed Python's stack
# while it was copied to plain data (RecursionError). Tool schemas nest about ten deep.
MAX_TEMPLATE_DATA_DEPTH = 64
# Wall-clock seconds of one rendering, the backstop behind the step count (checked every 32 steps).
MAX_TEMPLATE_SECONDS = 5.0
# Bytes of a session cache entry's record read at most (runtime/session_cache.py): ours hold one
# line per referenced file; a larger one is not an entry of ours and is made again.
MAX_CACHE_RECORD_BYTES = 1 << 20

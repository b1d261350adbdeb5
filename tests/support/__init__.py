"""Helpers shared by the test suites (tests/ is on sys.path: pytest's rootdir conftest, and
tests/fuzz/fuzz.py puts it there). Test modules import helpers from here, never from each other.

models.py      base model, LINEAR_INT4_128, hand-written decoders/encoders, execution-test models
oracles.py     numpy oracles of the models in models.py
data.py        random payload bytes, the bit-phase grid of the view and pack suites
view_oracle.py an independent bit-level reader of any declaration (views and the writer)
formats.py     the user path for one block format (decode/encode), float comparison, ONNX validity
oracle_gguf.py, oracle_mx.py, oracle_nf4.py, oracle_linear.py
               each block-format family's independent oracle (gguf-py, ml_dtypes, numpy)
roundtrip.py   common(): one round trip of any block format against its family's oracle
tiers.py       the test tiers' rule: a test that starts a child process is marked slow (conftest enforces it)
"""

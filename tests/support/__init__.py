"""Helpers shared by the test suites (tests/ is on sys.path: pytest's rootdir conftest, and
tests/fuzz/fuzz.py puts it there). Test modules import helpers from here, never from each other.

models.py      base model, LINEAR_INT4_128, hand-written decoders/encoders, execution-test models
oracles.py     numpy oracles of the models in models.py
data.py        random payload bytes, the bit-phase grid of the view and pack suites
view_oracle.py an independent bit-level reader of any declaration (views and the writer)
formats.py     the user path for one block format (decode/encode), float comparison, ONNX validity
roundtrip.py   one round trip per registered format against its independent oracle
"""

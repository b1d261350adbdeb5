"""The package version, in the foundation layer so that the CLI can print it without importing the
facade (onnx_struct/__init__.py), which sits above it. Keep equal to pyproject.toml's version."""

__version__ = "0.1.0"

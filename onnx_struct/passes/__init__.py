"""Model rewrites built on the layers below (quantize)."""

"""Bytes of struct values: one resolver for external references, views, the writer, external-data I/O."""

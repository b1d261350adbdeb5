"""Declarations as layouts: dtypes, sizes, leaves and the bit kernels. No protobuf, no files."""

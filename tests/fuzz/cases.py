"""A fuzz case: everything one target call needs, independent of the generator that made it.

A case is stored as a directory (``case.json``, the model directory ``m/`` with ``model.onnx`` and
its external files, ``outside.bin`` next to ``m/`` as bait for paths that leave the model
directory, ``input.gguf`` for GGUF cases, and ``input.bin``, the fuzz bytes it came from). Stored
findings therefore replay the same way after the generator changes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

MODEL_DIR = "m"
MODEL_FILE = "model.onnx"
OUTSIDE_FILE = "outside.bin"
OUTSIDE_BYTES = b"OUTSIDE-THE-MODEL-DIRECTORY\n" * 4


@dataclasses.dataclass
class Case:
    model: bytes = b""
    files: dict[str, bytes | int] = dataclasses.field(default_factory=dict)  # int: a sparse file of that size
    value: str | None = None  # the struct value view/decode ask for
    full_check: bool = False
    value_leaves_dir: bool = False  # the value's external location leaves the model directory
    gguf: bytes | None = None  # from_gguf: the .gguf file

    def write(self, root: Path) -> Path:
        """Materialize under ``root`` (emptied first); returns the model path."""
        if root.exists():
            shutil.rmtree(root)
        model_dir = root / MODEL_DIR
        model_dir.mkdir(parents=True)
        (root / OUTSIDE_FILE).write_bytes(OUTSIDE_BYTES)
        for name, content in self.files.items():
            target = model_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, int):
                with open(target, "wb") as handle:
                    handle.truncate(content)
            else:
                target.write_bytes(content)
        (model_dir / MODEL_FILE).write_bytes(self.model)
        if self.gguf is not None:
            (root / "input.gguf").write_bytes(self.gguf)
        meta = {
            "value": self.value,
            "full_check": self.full_check,
            "value_leaves_dir": self.value_leaves_dir,
            "files": {k: v for k, v in self.files.items() if isinstance(v, int)},
        }
        (root / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
        return model_dir / MODEL_FILE

    def save(self, root: Path, target: str, fuzz_input: bytes | None) -> None:
        """Store as a finding (files written as in ``write``, plus the target and fuzz bytes)."""
        self.write(root)
        meta = json.loads((root / "case.json").read_text())
        meta["target"] = target
        (root / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
        if fuzz_input is not None:
            (root / "input.bin").write_bytes(fuzz_input)
        for name in meta["files"]:  # sparse files are recreated from case.json
            os.unlink(root / MODEL_DIR / name)


def load_case(root: Path) -> tuple[str, Case, Path]:
    """(target, case, model path) of a stored finding; sparse files are recreated in place."""
    meta = json.loads((root / "case.json").read_text())
    model_dir = root / MODEL_DIR
    for name, size in meta.get("files", {}).items():
        with open(model_dir / name, "wb") as handle:
            handle.truncate(size)
    gguf = root / "input.gguf"
    case = Case(
        model=(model_dir / MODEL_FILE).read_bytes() if (model_dir / MODEL_FILE).exists() else b"",
        value=meta.get("value"),
        full_check=meta.get("full_check", False),
        value_leaves_dir=meta.get("value_leaves_dir", False),
        gguf=gguf.read_bytes() if gguf.exists() else None,
    )
    return meta["target"], case, model_dir / MODEL_FILE

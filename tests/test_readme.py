"""The README's example runs as written (so it cannot rot)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has a python example"
    code = blocks[0]
    assert len([line for line in code.splitlines() if line.strip() and not line.startswith("    ")]) <= 12
    exec(compile(code, str(README), "exec"), {})


def test_readme_names_install_and_test_commands_used_by_ci():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    assert 'python -m pip install ".[test]"' in text and 'python -m pip install ".[test]"' in ci
    assert "python -m pytest -q" in text and "python -m pytest -q" in ci

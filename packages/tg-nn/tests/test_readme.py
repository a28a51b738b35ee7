"""The README's training example runs as written."""

from __future__ import annotations

import pathlib
import re


def test_readme_training_example():
    text = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "the README has no python example"
    exec(compile(blocks[0], "README.md", "exec"), {"__name__": "readme_example"})

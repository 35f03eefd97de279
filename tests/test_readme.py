"""The README's first example runs as pasted, and computes what numpy computes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_first_example_runs_as_pasted() -> None:
    example = re.search(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert example is not None, "the README has no python example"
    names: dict[str, Any] = {}
    exec(compile(example.group(1), "README.md", "exec"), names)  # noqa: S102 - our own README
    xa, Wa, ba, out = (names[name] for name in ("xa", "Wa", "ba", "out"))
    want = np.maximum(xa.astype(np.float64) @ Wa + ba, 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


def test_the_supported_numpy_table_is_the_one_the_code_makes() -> None:
    from eqsat.frontend.numpy_protocol import supported_numpy_table

    block = re.search(
        r"<!-- supported-numpy: start -->\n(.*?)\n<!-- supported-numpy: end -->",
        README.read_text(),
        re.DOTALL,
    )
    assert block is not None, "the README has no supported-numpy table"
    assert block.group(1) == supported_numpy_table(), "paste supported_numpy_table() into it"

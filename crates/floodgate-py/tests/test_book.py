"""Every `python` block of the book (docs/*.md) runs as written, against the installed
module (and the Redis on 127.0.0.1:6379 where a block calls `throttle`)."""

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs"
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def python_blocks():
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            yield pytest.param(m.group(1), id=f"{page.name}:{line}")


BLOCKS = list(python_blocks())


def test_the_book_has_python_examples():
    assert BLOCKS, f"no python block under {DOCS}"


@pytest.mark.parametrize("code", BLOCKS)
def test_book_python_block_runs(code):
    exec(compile(code, "<book>", "exec"), {"__name__": "__book__"})

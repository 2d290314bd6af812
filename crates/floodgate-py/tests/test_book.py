"""Every `python` block of the book (docs/*.md) and of the package's README runs as
written, against the installed module (and the Redis on 127.0.0.1:6379 where a block
calls `throttle`), and every value its comments show is the value the code gives.

A comment shows a value when it starts like one: a number, `True`, `False`, `None`, a
bracket, a quote, or a constructor's repr (`Decision(...)`). Such a comment must end a
top-level statement's line, or be a line of its own right after one, and start with the
repr of that statement's value (an expression's, or an assignment's target's); the rest
of the comment is prose. A value comment anywhere else fails the test, so none goes
unchecked. `throttle` runs on keys of this run's own (the block's key with a suffix,
deleted afterwards), and a `RedisStore` under a prefix of this run's own, so "on a fresh
key" holds on a shared Redis."""

import ast
import io
import pathlib
import re
import shutil
import subprocess
import tokenize
import uuid

import pytest

import floodgate

DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs"
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
VALUE = re.compile(r"(True|False|None)\b|-?[0-9]|[(\[{'\"]|[A-Z]\w*\(")
RUN = uuid.uuid4().hex


README = DOCS.parent / "crates" / "floodgate-py" / "README.md"


def python_blocks():
    # the book's pages, and the package's README (the long description an index shows)
    for page in [*sorted(DOCS.glob("*.md")), README]:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            yield pytest.param(m.group(1), id=f"{page.name}:{line}")


BLOCKS = list(python_blocks())


def value_comments(code):
    """{line: (text, own_line)} for every comment that starts like a value."""
    found = {}
    lines = code.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string[1:].strip()
            if VALUE.match(text):
                row = tok.start[0]
                own = lines[row - 1].lstrip().startswith("#")
                found[row] = (text, own)
    return found


def shows(comment, value):
    """Whether `comment` starts with `repr(value)`, as a whole."""
    r = repr(value)
    return comment.startswith(r) and not re.match(r"[\w.]", comment[len(r):])


def run_checked(code, ns):
    """Runs `code` statement by statement in `ns`, checking its value comments."""
    comments = value_comments(code)
    checked = set()
    tree = ast.parse(code)
    for stmt in tree.body:
        # a compound statement's last line is its body's: its comments are not the block's
        simple = not hasattr(stmt, "body")
        claimed = [
            (row, text)
            for row, (text, own) in comments.items()
            if simple
            and ((row == stmt.end_lineno and not own) or (row == stmt.end_lineno + 1 and own))
        ]
        if isinstance(stmt, ast.Expr):
            value = eval(compile(ast.Expression(stmt.value), "<book>", "eval"), ns)
        else:
            exec(compile(ast.Module([stmt], type_ignores=[]), "<book>", "exec"), ns)
            value = None
            if claimed:
                assert (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                ), f"line {stmt.lineno}: a value comment on a statement that has no value"
                value = ns[stmt.targets[0].id]
        for row, text in claimed:
            assert shows(text, value), (
                f"line {row}: the comment shows {text!r}, the code gives {value!r}"
            )
            checked.add(row)
    unchecked = sorted(set(comments) - checked)
    assert not unchecked, (
        f"lines {unchecked}: comments that show a value not attached to a top-level "
        "statement (put the value after the statement, or reword the comment)"
    )


@pytest.fixture
def own_keys(monkeypatch):
    """`floodgate.throttle` and `floodgate.RedisStore` on this run's keys; deleted from
    Redis afterwards."""
    real = floodgate.throttle

    def throttle(key, *args, **kwargs):
        suffix = f"-{RUN}"
        key = key + (suffix.encode() if isinstance(key, bytes) else suffix)
        return real(key, *args, **kwargs)

    monkeypatch.setattr(floodgate, "throttle", throttle)
    real_store = floodgate.RedisStore

    def redis_store(url="redis://127.0.0.1:6379", *, prefix="floodgate:", **kwargs):
        return real_store(url, prefix=f"{prefix}{RUN}:", **kwargs)

    monkeypatch.setattr(floodgate, "RedisStore", redis_store)
    yield
    if shutil.which("redis-cli"):
        cli = ["redis-cli", "-h", "127.0.0.1", "-p", "6379"]
        keys = subprocess.run(
            [*cli, "--scan", "--pattern", f"*{RUN}*"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.split()
        if keys:
            subprocess.run([*cli, "DEL", *keys], capture_output=True, timeout=10, check=True)


def test_the_book_has_python_examples():
    assert BLOCKS, f"no python block under {DOCS}"


@pytest.mark.parametrize("code", BLOCKS)
def test_book_python_block_runs(code, own_keys):
    run_checked(code, {"__name__": "__book__"})


def test_value_comments_are_checked():
    run_checked("x = 1 + 1  # 2, the sum\ny = [x]\n# [2]\nx  # 2\nz = 'a'  # a letter\n", {})
    with pytest.raises(AssertionError, match="shows '3'"):
        run_checked("1 + 1  # 3\n", {})
    with pytest.raises(AssertionError, match="shows '2.5'"):
        run_checked("2  # 2.5\n", {})
    with pytest.raises(AssertionError, match="not attached"):
        run_checked("if True:\n    x = 2  # 2\n", {})

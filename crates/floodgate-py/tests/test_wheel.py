"""The release wheel installs and works without Rust: installed from the file into a fresh
virtualenv whose `PATH` holds no cargo or rustc, it imports as `floodgate` and
`rate_limiter`, carries the metadata a package index takes, and the book's Python
examples (docs/*.md) and the package README's run there.

The wheel is the one scripts/test-python.sh builds (`maturin build --release`) into
target/pywheels/; $FLOODGATE_WHEEL names another."""

import json
import os
import pathlib
import re
import shutil
import site
import subprocess
import sys
import tomllib
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
CRATE = ROOT / "crates" / "floodgate-py"
TESTS = pathlib.Path(__file__).resolve().parent


def the_wheel():
    named = os.environ.get("FLOODGATE_WHEEL")
    if named:
        return pathlib.Path(named)
    found = sorted((ROOT / "target" / "pywheels").glob("floodgate-*.whl"))
    assert len(found) == 1, (
        f"expected one wheel in target/pywheels/ (scripts/test-python.sh builds it), found {found}")
    return found[0]


def workspace_version():
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    return cargo["workspace"]["package"]["version"]


def rustless_path():
    """PATH without the directories that hold cargo or rustc."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any((pathlib.Path(d) / t).exists() for t in ("cargo", "rustc"))]
    path = os.pathsep.join(dirs)
    assert shutil.which("cargo", path=path) is None and shutil.which("rustc", path=path) is None
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh virtualenv with the wheel installed from its file, and the environment
    (no cargo or rustc on PATH) its commands run with."""
    wheel = the_wheel()
    root = tmp_path_factory.mktemp("fresh") / "venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "CARGO", "CARGO_HOME",
                        "RUSTUP_HOME", "CARGO_TARGET_DIR")}
    env["PATH"] = rustless_path()
    base = getattr(sys, "_base_executable", sys.executable)
    # without pip of its own (ensurepip takes most of the time): this run's pip installs
    # into it with --python, as `pip install` in the venv would
    subprocess.run([base, "-m", "venv", "--without-pip", str(root)], check=True, env=env,
                   timeout=120)
    py = root / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                    "--disable-pip-version-check", "--no-index", "--no-deps", str(wheel)],
                   check=True, env=env, timeout=120)
    return py, env


def run(venv, *args, **kw):
    py, env = venv
    r = subprocess.run([str(py), *args], capture_output=True, text=True, env=env,
                       cwd=kw.pop("cwd", ROOT), timeout=kw.pop("timeout", 120), **kw)
    assert r.returncode == 0, f"{args}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_the_wheel_is_one_abi3_wheel_with_stubs():
    wheel = the_wheel()
    # abi3 for CPython >= 3.10; a manylinux platform tag, which indexes take (not linux_*)
    assert re.fullmatch(r"floodgate-[0-9.]+-cp310-abi3-manylinux_2_\d+_[a-z0-9_]+\.whl",
                        wheel.name), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    for f in ("floodgate/__init__.py", "floodgate/_floodgate.pyi", "floodgate/py.typed",
              "rate_limiter/__init__.py", "rate_limiter/py.typed"):
        assert f in names, (f, names)
    assert any(re.fullmatch(r"floodgate/_floodgate\.abi3\.so", n) for n in names), names


def test_it_imports_from_the_fresh_venv_without_rust(venv):
    out = run(venv, "-c", """
import json, floodgate, rate_limiter
from rate_limiter import FixedWindow
assert FixedWindow is floodgate.FixedWindow
w = FixedWindow(limit=2, window_s=1.0)
print(json.dumps({"floodgate": floodgate.__file__, "rate_limiter": rate_limiter.__file__,
                  "profile": floodgate._floodgate.BUILD_PROFILE,
                  "allowed": [w.allow(now=0.1) for _ in range(3)]}))
""")
    assert json.loads(out)["profile"] == "release"
    got = json.loads(out)
    venv_root = str(venv[0].parent.parent)
    assert got["floodgate"].startswith(venv_root), got
    assert got["rate_limiter"].startswith(venv_root), got
    assert got["allowed"] == [True, True, False]


def test_the_metadata_is_what_an_index_takes(venv):
    out = run(venv, "-c", """
import json
from importlib.metadata import metadata, files
m = metadata("floodgate")
print(json.dumps({k: m.get_all(k) for k in set(m.keys())} | {
    "body": m.get_payload(),
    "files": [str(f) for f in files("floodgate")]}))
""")
    m = json.loads(out)
    assert m["Name"] == ["floodgate"]
    assert m["Version"] == [workspace_version()]
    assert m["Metadata-Version"][0] >= "2.1"
    assert (m.get("License-Expression") or m.get("License")) == ["MIT OR Apache-2.0"], m
    assert m["Requires-Python"] == [">=3.10"]
    assert m["Summary"] and m["Summary"][0]
    assert m["Description-Content-Type"][0].startswith("text/markdown")
    readme = (CRATE / "README.md").read_text()
    assert m["body"].strip() == readme.strip()
    assert "Typing :: Typed" in m["Classifier"]
    assert all(re.fullmatch(r"[A-Z][\w .+/-]* :: .+", c) for c in m["Classifier"]), m["Classifier"]
    assert {"floodgate/py.typed", "floodgate/_floodgate.pyi", "rate_limiter/py.typed"} <= set(
        m["files"]), m["files"]


def test_the_books_and_readmes_python_examples_run_in_the_fresh_venv(venv, tmp_path):
    """test_book.py runs in the fresh venv: pytest comes from this run's environment,
    appended after the venv's own packages, so `floodgate` is the wheel's."""
    py, _ = venv
    site_dir = next((py.parent.parent / "lib").glob("python3*/site-packages"))
    (site_dir / "zz_test_tools.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    try:
        where = run(venv, "-c", "import floodgate, pytest; print(floodgate.__file__)")
        assert where.startswith(str(py.parent.parent)), where
        out = run(venv, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  str(TESTS / "test_book.py"), str(TESTS / "test_stubs.py"), timeout=300)
        assert re.search(r"\b\d+ passed\b", out) and " failed" not in out, out
    finally:
        (site_dir / "zz_test_tools.pth").unlink()

#!/usr/bin/env bash
# Builds the Python module (crates/floodgate-py) as a release wheel into target/pywheels/,
# installs it into a virtualenv under target/pyenv, and runs its pytest suite (which also
# installs the wheel into a fresh virtualenv without Rust: tests/test_wheel.py).
# Idempotent: the venv and its tools are kept between runs; the wheel is rebuilt
# (incrementally) and reinstalled every time.
# Needs python3 (>= 3.10) with venv and pip, a Redis on 127.0.0.1:6379 (throttle(),
# RedisStore, the middleware's Redis tests) and redis-server (the tests that stop a Redis of their own).
# Extra arguments go to pytest (e.g. -k keyed).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/pyenv
py="$venv/bin/python"
if ! "$py" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
fi
if ! "$venv/bin/maturin" --version >/dev/null 2>&1 || ! "$py" -c 'import pytest' 2>/dev/null; then
    "$py" -m pip install -q --disable-pip-version-check 'maturin>=1.9,<2' 'pytest>=8'
fi
# `limits` (the notation of slowapi and Flask-Limiter): tests/test_rates.py compares its
# parse_many with floodgate.parse_rates, string for string.
if ! "$py" -c 'import limits' 2>/dev/null; then
    "$py" -m pip install -q --disable-pip-version-check 'limits>=5,<6'
fi
# The frameworks the middleware and decorators are tested with (tests/test_asgi.py,
# test_wsgi.py, test_decorators.py, docs/python-middleware.md), and httpx to drive them.
if ! "$py" -c 'import fastapi, starlette, uvicorn, httpx, flask, werkzeug, django' 2>/dev/null; then
    "$py" -m pip install -q --disable-pip-version-check 'fastapi>=0.115,<1' \
        'starlette>=0.40,<2' 'uvicorn>=0.30,<1' 'httpx>=0.27,<1' 'flask>=3.0,<4' \
        'werkzeug>=3.0,<4' 'django>=5.2,<7'
fi

# The release wheel, built once: the one abi3 wheel that ships, tested here and, by
# tests/test_wheel.py, installed into a fresh virtualenv with no cargo on PATH.
wheels=target/pywheels
rm -rf "$wheels"
# No --compatibility: maturin audits the library's glibc symbols and tags the wheel
# manylinux_2_X (a plain linux_x86_64 tag is refused by package indexes).
"$venv/bin/maturin" build --release --quiet -m crates/floodgate-py/Cargo.toml -i "$py" \
    -o "$wheels"
"$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheels"/floodgate-*.whl

# The floodgate binary for the tests that compare the module with a real `floodgate proxy`
# (tests/proxyproc.py), unless $FLOODGATE_BIN names one.
if [ -z "${FLOODGATE_BIN:-}" ]; then
    cargo build --quiet --bin floodgate
fi

# -p no:cacheprovider: no .pytest_cache in the work tree.
"$py" -m pytest -q -p no:cacheprovider crates/floodgate-py/tests "$@"

#!/usr/bin/env bash
# Builds the Python module (crates/floodgate-py) as a wheel, installs it into a virtualenv
# under target/pyenv, and runs its pytest suite. Idempotent: the venv and its tools are
# kept between runs; the wheel is rebuilt (incrementally) and reinstalled every time.
# Needs python3 (>= 3.10) with venv and pip, and a Redis on 127.0.0.1:6379 for throttle().
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

# A debug build: faster to compile, and Rust's overflow checks stay on under the tests.
wheels=target/pywheels
rm -rf "$wheels"
"$venv/bin/maturin" build --quiet -m crates/floodgate-py/Cargo.toml -i "$py" \
    --compatibility linux -o "$wheels"
"$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheels"/floodgate-*.whl

# -p no:cacheprovider: no .pytest_cache in the work tree.
"$py" -m pytest -q -p no:cacheprovider crates/floodgate-py/tests "$@"

#!/usr/bin/env bash
# Run every fuzz target for a bounded time (default 30 s each) from its seed corpus in
# fuzz/corpus/<target>. New inputs go to target/fuzz-corpus/<target>, so the repo stays
# clean. A crash fails the script; its input is in fuzz/artifacts/<target>/: turn it into a
# regression test, fix, and add the input to the seed corpus.
# Stable Rust: no sanitizer (-s none); libFuzzer's coverage instrumentation works on stable.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
targets=$(cd fuzz && cargo fuzz list)
(cd fuzz && cargo fuzz build -O -s none)
for t in $targets; do
  mkdir -p "target/fuzz-corpus/$t"
  echo "== fuzz $t for ${secs}s"
  (cd fuzz && cargo fuzz run -O -s none "$t" "../target/fuzz-corpus/$t" "corpus/$t" -- \
      -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 2>&1 | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|Done)|panicked|ERROR" || true)
  # libFuzzer exits non-zero on a crash; cargo fuzz then leaves an artifact
  if ls fuzz/artifacts/"$t"/crash-* >/dev/null 2>&1; then
    echo "fuzz $t: crash found, see fuzz/artifacts/$t" >&2
    exit 1
  fi
done
echo "fuzz: $(echo $targets | wc -w) targets, ${secs}s each, no crash"

#!/usr/bin/env bash
# The docs speak of the product: dates, versions, commands and commits, never of how the
# project was written. Fails on such words in README.md, docs/ and the crates' READMEs.
set -euo pipefail
cd "$(dirname "$0")/.."
pattern='\b(sessions?|helpers?|subagents?|this round|next round|earlier today)\b'
files=$(git ls-files 'README.md' 'docs/*.md' 'docs/**/*.md' 'crates/*/README.md')
if grep -n -i -E "$pattern" $files; then
    echo "check-words: the lines above speak of how the project was written; say the date, commit or command instead" >&2
    exit 1
fi
echo "check-words: $(echo "$files" | wc -w) files clean"

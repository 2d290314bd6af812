#!/usr/bin/env bash
# The docs speak of the product: dates, versions, commands, commits and the machine a
# figure was measured on, never of how the project was written. Fails on such words in
# README.md, docs/, the crates' READMEs and the design records (design/); and on words of
# changes tried and dropped in README.md, docs/ and the crates' READMEs, whose place is a
# design record. With file arguments, reads those files as guide pages (tests/check_words.rs
# feeds it each phrase).
set -euo pipefail
files=()
for f in "$@"; do files+=("$(realpath "$f")"); done
cd "$(dirname "$0")/.."
# How the project was written: who wrote it, in which round, for which ticket or aim; a
# figure names the machine by its description ("a 2-core Intel Xeon VM with 23 GB of memory").
pattern='\b(sessions?|helpers?|subagents?|this round|next round|earlier today|goals?|this ([0-9]+-core )?(machine|vm|host)|the project'"'"'s ([0-9]+-core )?(linux )?(machine|vm)|issue [0-9]+|the issue|aims? of)\b'
# Changes tried and dropped: recorded in design/, out of the guide.
kept='\b(measured and not kept|not kept|not landed)\b'
if [ "${#files[@]}" -gt 0 ]; then
    guide="${files[*]}"
    design=""
else
    guide=$(git ls-files 'README.md' 'docs/*.md' 'docs/**/*.md' 'crates/*/README.md')
    design=$(git ls-files 'design/*.md')
fi
status=0
if grep -H -n -i -E "$pattern" $guide $design; then
    echo "check-words: the lines above speak of how the project was written; say the date, commit, machine or command instead, and state a target as one (\"the target: at least 2x ...; measured: ...\")" >&2
    status=1
fi
if grep -H -n -i -E "$kept" $guide; then
    echo "check-words: the lines above describe a change that was dropped; move it to a record in design/ and leave what ships" >&2
    status=1
fi
# Code, tests and scripts: their comments and messages too (narrower: "helper" and
# "session" name things in code).
code_pattern='\b(goals?|this ([0-9]+-core )?(machine|vm)|issue [0-9]+|the issue|aims? of)\b'
code=$(git ls-files '*.rs' '*.py' '*.sh' '.ci/*' | grep -v '^scripts/check-words.sh$\|^tests/check_words.rs$')
[ "${#files[@]}" -gt 0 ] && code=""
if [ -n "$code" ] && grep -H -n -i -E "$code_pattern" $code; then
    echo "check-words: the lines above (code, tests, scripts) speak of how the project was written" >&2
    status=1
fi
[ "$status" = 0 ] || exit 1
echo "check-words: $(echo $guide $design $code | wc -w) files clean"

#!/usr/bin/env bash
# Lua 5.4's own test suite (testes/ of lua/lua v5.4.4, LICENSE) under tcrun and tcrun --compile-all.
# Each file runs in light mode (_soft = true, the suite's own switch; _port = false) under both; both must exit
# 0 with the same standard output (lines that print timings or random seeds compared without their
# digits; stderr, where tc's recompile-limit warnings go, is shown on failure only).
# SKIP lists whole files or line ranges (blanked in a copy, so line numbers stay) with a reason.
#   tests/lua54/run.sh [TCRUN [FILE...]]     (from anywhere; default TCRUN: build/tcrun)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
tcrun="$(realpath "${1:-$here/../../build/tcrun}")"
shift || true
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/libs/P1"  # the files run in $tmp: attrib.lua writes its modules under libs/
pre="_soft = true; _port = false; _nomsg = true; function Message() end; math.randomseed(7);
package.path = '$here/?.lua;' .. package.path"  # the suite's helper modules (tracegc, bwcoercion)
limit=60  # seconds per run

# the suite's volatile lines: timings, seeds, counts of random draws
normalize() { sed -E '/(msec|random seeds|random range|clock|time|done on)/s/[0-9.]+//g' "$1"; }

files=("$@")
# every file of the suite: those kept here and those SKIP leaves out whole (not kept)
[ ${#files[@]} -gt 0 ] || files=($( (cd "$here" && ls *.lua; awk '/^[a-z0-9]+\.lua /{ print $1 }' "$here/SKIP") | sort -u))
passed=0 skipped=0 failed=0
for f in "${files[@]}"; do
  whole=$(awk -v f="$f" '$1 == f { $1 = ""; print substr($0, 2); exit }' "$here/SKIP")
  if [ -n "$whole" ]; then
    echo "skip $f: $whole"
    skipped=$((skipped + 1))
    continue
  fi
  # blank the skipped line ranges of this file
  ranges=$(awk -v f="$f" 'index($1, f ":") == 1 { sub(/^[^:]*:/, "", $1); print $1 }' "$here/SKIP")
  awk -v ranges="$ranges" 'BEGIN { n = split(ranges, r, "\n") }
    { for (j = 1; j <= n; j++) { split(r[j], b, "-"); if (NR >= b[1] + 0 && NR <= b[2] + 0) { print ""; next } } print }' \
    "$here/$f" > "$tmp/$f"
  (cd "$tmp" && timeout $limit "$tcrun" -e "$pre" "$tmp/$f" < /dev/null > "$tmp/plain.out" 2> "$tmp/plain.err")
  rc_plain=$?
  (cd "$tmp" && timeout $limit "$tcrun" --compile-all -e "$pre" "$tmp/$f" < /dev/null > "$tmp/compiled.out" 2> "$tmp/compiled.err")
  rc_compiled=$?
  if [ $rc_plain -ne 0 ]; then
    echo "FAIL $f: plain tcrun exits $rc_plain (list it in SKIP with a reason if stock tcrun cannot run it)"
    tail -5 "$tmp/plain.err" | sed 's/^/    /'
    failed=$((failed + 1))
  elif [ $rc_compiled -ne 0 ]; then
    echo "FAIL $f: tcrun --compile-all exits $rc_compiled, plain tcrun 0"
    tail -8 "$tmp/compiled.err" | sed 's/^/    /'
    failed=$((failed + 1))
  elif ! diff <(normalize "$tmp/plain.out") <(normalize "$tmp/compiled.out") > "$tmp/diff"; then
    echo "FAIL $f: output differs (< plain, > --compile-all)"
    head -10 "$tmp/diff" | sed 's/^/    /'
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
done
echo "lua54: $passed passed, $skipped skipped, $failed failed (line ranges skipped: $(grep -c '^[a-z0-9]*\.lua:' "$here/SKIP"))"
[ $failed -eq 0 ]

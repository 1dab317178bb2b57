#!/usr/bin/env bash
# `make` only builds: installing is scripts/setup.sh's, which `make setup`,
# `make run` and `make test` call; a plain build never runs it. A build without the toolchain
# stops with one line naming what to run instead of a compiler error.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# What each target would run (-n prints the commands; -B: as if nothing were built yet). A fresh
# BUILD folder, so the setup stamp is absent too.
b=$tmp/build
if make -n -B BUILD="$b" all 2>&1 | grep -q "bash scripts/setup.sh"; then fail make_only_builds "make all would run scripts/setup.sh"
elif ! make -n -B BUILD="$b" all 2>&1 | grep -q "libctitan.a"; then fail make_only_builds "make -n all shows no build"
else pass make_only_builds; fi
for target in setup run test; do
  if make -n BUILD="$b" "$target" 2>/dev/null | grep -q "bash scripts/setup.sh"; then pass "make_${target}_installs_first"
  else fail "make_${target}_installs_first" "make -n $target does not run scripts/setup.sh"; fi
done

# No compiler: one line, non-zero.
out=$(make BUILD="$b" CC=ctitan-no-such-mpicc 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "make: ctitan-no-such-mpicc not found: run 'make setup'"; then
  pass missing_toolchain_says_make_setup
else
  fail missing_toolchain_says_make_setup "exit $rc: $(echo "$out" | head -3)"
fi

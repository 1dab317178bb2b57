#!/usr/bin/env bash
# No public function goes unused (scripts/unused_functions.sh). First the real tree; then the
# checker on a small fake tree, where a function only its header and definition name must be
# reported and functions a test, a kernel table or another file calls must not, so a checker that
# passes everything fails here.
set -u
cd "$(dirname "$0")/.."
check=$PWD/scripts/unused_functions.sh

if out=$(bash "$check" 2>&1); then echo "PASS no_unused_functions"
else echo "FAIL no_unused_functions"; echo "$out" | sed 's/^/    /'; fi

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
t=$tmp/tree
mkdir -p "$t"/src/core "$t"/src/kernels "$t"/tests
cat >"$t/src/core/thing.h" <<'H'
// ct_in_comment_only is named in this comment, so it counts as used.
int ct_planted(void);
long ct_called(long x);
int ct_test_hook(void);
void ct_in_table(float *x);
void ct_in_comment_only(void);
static inline int ct_inline_helper(void) { return 1; }
typedef int (*ct_fn)(int);
H
cat >"$t/src/core/thing.c" <<'C'
#include "core/thing.h"
int ct_planted(void) { return 1; }
long ct_called(long x) { return x; }
int ct_test_hook(void) { return 2; }
void ct_in_table(float *x) { (void)x; }
void ct_in_comment_only(void) {}
C
printf '#include "core/thing.h"\nstatic const struct { void (*f)(float *); } t = {.f = ct_in_table};\nlong u(void) { return ct_called(1); }\n' >"$t/src/kernels/table.c"
printf '#include "core/thing.h"\nint main(void) { return ct_test_hook() - 2; }\n' >"$t/tests/test_thing.c"
out=$(bash "$check" "$t" 2>/dev/null); rc=$?
if [ $rc -eq 1 ] && [ "$out" = "src/core/thing.h: ct_planted" ]; then echo "PASS reports_a_planted_unused_function"
else echo "FAIL reports_a_planted_unused_function: exit $rc, wanted only 'src/core/thing.h: ct_planted', got:"; echo "$out" | sed 's/^/    /'; fi

# Once the planted function has a caller, the tree is clean.
printf 'int v(void) { return ct_planted(); }\n' >>"$t/src/kernels/table.c"
if out=$(bash "$check" "$t" 2>&1); then echo "PASS clean_tree_passes"
else echo "FAIL clean_tree_passes: $out"; fi

#!/usr/bin/env bash
# The include graph points one way (scripts/check_includes.sh). First the real tree; then the
# checker itself, on small fake trees: a clean one must pass and each planted violation must be
# reported as exactly one "file:line: dir -> dir" line, so a checker that passes everything fails
# here.
set -u
cd "$(dirname "$0")/.."
check=$PWD/scripts/check_includes.sh

if out=$(bash "$check" 2>&1); then echo "PASS include_graph"
else echo "FAIL include_graph"; echo "$out" | sed 's/^/    /'; fi

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# A clean tree: each layer using what it may, kernels through backend.h only.
make_tree() {
  local t=$1
  mkdir -p "$t"/src/{core,kernels/cpu,comm,model,parallel,train,cli}
  printf '#include <stddef.h>\n' >"$t/src/core/error.h"
  printf '#include "core/error.h"\n' >"$t/src/kernels/backend.h"
  printf '#include "core/error.h"\n' >"$t/src/kernels/kernels.h"
  printf '#include "kernels/kernels.h"\n#include "fastmath.h"\n' >"$t/src/kernels/cpu/gemm.c"
  printf '#include <math.h>\n' >"$t/src/kernels/cpu/fastmath.h"
  printf '#include <mpi.h>\n#include "core/error.h"\n' >"$t/src/comm/comm.h"
  printf '#include "core/error.h"\n#include "kernels/backend.h"\n' >"$t/src/model/weights.h"
  printf '#include "model/weights.h"\n#include "comm/comm.h"\n' >"$t/src/parallel/fsdp.h"
  printf '#include "parallel/fsdp.h"\n#include "../model/weights.h"\n' >"$t/src/train/trainer.c"
  printf '#include "train/../parallel/fsdp.h"\n#include "core/error.h"\n' >"$t/src/cli/main.c"
}

# expect NAME FILE LINE_TO_APPEND EXPECTED_REPORT_PREFIX
expect() {
  local name=$1 file=$2 line=$3 want=$4 t="$tmp/$1" out rc
  make_tree "$t"
  mkdir -p "$(dirname "$t/$file")"
  printf '%s\n' "$line" >>"$t/$file"
  out=$(bash "$check" "$t" 2>/dev/null); rc=$?
  if [ $rc -eq 1 ] && [ "$(echo "$out" | grep -c .)" -eq 1 ] && [[ $out == "$want"* ]]; then echo "PASS $name"
  else echo "FAIL $name: exit $rc, wanted one line starting '$want', got:"; echo "$out" | sed 's/^/    /'; fi
}

make_tree "$tmp/clean"
if out=$(bash "$check" "$tmp/clean" 2>&1); then echo "PASS include_graph_accepts_clean_tree"
else echo "FAIL include_graph_accepts_clean_tree"; echo "$out" | sed 's/^/    /'; fi

expect include_graph_catches_violation src/core/error.h '#include "model/weights.h"' 'src/core/error.h:2: core -> model'
expect include_graph_catches_kernels_comm src/comm/comm.h '#include "kernels/backend.h"' 'src/comm/comm.h:3: comm -> kernels'
expect include_graph_catches_kernel_internals src/train/trainer.c '#include "kernels/kernels.h"' \
  'src/train/trainer.c:3: train -> kernels'
expect include_graph_catches_kernel_cpu_in_cli src/cli/main.c '#include "kernels/cpu/fastmath.h"' \
  'src/cli/main.c:3: cli -> kernels'
expect include_graph_catches_mpi_in_core src/core/error.c '#include <mpi.h>' 'src/core/error.c:1: core -> <mpi.h>'
expect include_graph_catches_mpi_in_parallel src/parallel/fsdp.h '#include <mpi.h>' \
  'src/parallel/fsdp.h:3: parallel -> <mpi.h>'
expect include_graph_catches_getopt src/cli/main.c '#include <getopt.h>' 'src/cli/main.c:3: cli -> <getopt.h>'
expect include_graph_catches_unknown_dir src/misc/thing.c '#include "core/error.h"' 'src/misc/thing.c:1: misc -> core'

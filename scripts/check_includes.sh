#!/usr/bin/env bash
# Checks that the include graph under src/ points one way (DESIGN.md, "Layers"):
#   core <- kernels | comm <- model <- parallel <- plan <- train <- cli,  data/checkpoint/metrics beside
# Every #include "..." is resolved the way the compiler does (next to the file, then -Isrc) and
# the target's top directory must be the file's own or one its layer may use (ALLOWED below).
# Plus: only src/kernels/** sees kernel internals (everyone else: "kernels/backend.h" only),
# and only src/comm includes <mpi.h>, so the rest builds and tests without MPI; CUDA and NCCL
# headers only in src/kernels/cuda/ and src/comm/comm_nccl.* (the files a CUDA=1 build adds).
# And nothing includes <getopt.h>: every subcommand parses its options with cli/options.c (issue
# 15, item 9: one option parser), so a getopt loop -- or its stale include -- is a second one.
#
# usage: scripts/check_includes.sh [ROOT]   (ROOT holds src/; default: this repository)
# Prints "file:line: dir -> dir (why)" per violation and exits 1, else one summary line, exit 0.
set -u
root=${1:-"$(dirname "$0")/.."}
cd "$root" 2>/dev/null || { echo "check_includes: no directory $root" >&2; exit 2; }
[ -d src ] || { echo "check_includes: $root has no src/" >&2; exit 2; }

# The layers each directory may include besides itself. A directory missing here is itself a
# violation: a new one must say where it sits before it can include anything.
declare -A ALLOWED=(
  [core]=""
  [kernels]="core"
  [comm]="core"
  [data]="core"
  [metrics]="core"
  [model]="core kernels"
  [checkpoint]="core model"
  [parallel]="core kernels comm model"
  [plan]="core kernels comm model parallel"
  [train]="core kernels comm model data checkpoint metrics parallel plan"
  [cli]="*"
)

violations=0 files=0 includes=0
report() { echo "$1:$2: $3 -> $4 ($5)"; violations=$((violations + 1)); }

# The top directory under src/ of a path relative to src/ ("model/weights.h" -> model).
top_dir() { local p=$1; [[ $p == */* ]] && echo "${p%%/*}" || echo "(src)"; }

# Normalises a relative path ("kernels/../core/x.h" -> "core/x.h"); no filesystem access.
normalise() {
  local IFS=/ part out=()
  for part in $1; do
    case $part in
      ''|.) ;;
      ..) [ ${#out[@]} -gt 0 ] && unset 'out[${#out[@]}-1]' ;;
      *) out+=("$part") ;;
    esac
  done
  echo "${out[*]}"
}

include_re='^[[:space:]]*#[[:space:]]*include[[:space:]]*([<"])([^">]+)[">]'
while IFS= read -r file; do
  files=$((files + 1))
  rel=${file#src/}
  dir=$(top_dir "$rel")
  here=$(dirname "$rel")
  known=1
  [ -n "${ALLOWED[$dir]+x}" ] || known=0
  lineno=0
  while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    [[ $line =~ $include_re ]] || continue
    kind=${BASH_REMATCH[1]} inc=${BASH_REMATCH[2]}
    includes=$((includes + 1))
    if [ "$inc" = mpi.h ]; then
      if [ "$dir" = core ]; then report "$file" $lineno "$dir" "<mpi.h>" "core never depends on MPI"
      elif [ "$dir" != comm ]; then report "$file" $lineno "$dir" "<mpi.h>" "only comm/ may include mpi.h"; fi
      continue
    fi
    if [ "$inc" = getopt.h ]; then
      report "$file" $lineno "$dir" "<getopt.h>" "options are parsed by cli/options.c, the one option parser"
      continue
    fi
    # CUDA, cuBLAS(Lt) and NCCL headers: only the cuda kernels and the nccl comm backend, so
    # the default build (no CUDA=1) never needs the toolkit.
    if [[ $inc =~ ^(cuda|cublas|nccl|library_types|driver_types|vector_types) ]]; then
      if [[ $rel != kernels/cuda/* && $rel != comm/comm_nccl.* ]]; then
        report "$file" $lineno "$dir" "<$inc>" "only src/kernels/cuda/ and src/comm/comm_nccl.* may include CUDA/NCCL headers"
      fi
      continue
    fi
    [ "$kind" = '"' ] || continue  # other system headers are not layers
    # As the compiler: next to the including file first, then -Isrc.
    if [ -f "src/$here/$inc" ]; then target=$(normalise "$here/$inc")
    elif [ -f "src/$inc" ]; then target=$(normalise "$inc")
    else report "$file" $lineno "$dir" "$inc" "not found under src/"; continue; fi
    tdir=$(top_dir "$target")
    if [ $known = 0 ]; then
      report "$file" $lineno "$dir" "$tdir" "directory $dir is not in the layer table of scripts/check_includes.sh"
      continue
    fi
    if [ "$tdir" = kernels ] && [ "$dir" != kernels ] && [ "$target" != kernels/backend.h ]; then
      report "$file" $lineno "$dir" "$tdir" "$target is kernel-internal: outside kernels/ use kernels/backend.h"
      continue
    fi
    [ "$tdir" = "$dir" ] && continue
    allowed=" ${ALLOWED[$dir]} "
    [[ $allowed == " * " || $allowed == *" $tdir "* ]] && continue
    report "$file" $lineno "$dir" "$tdir" "$dir may include only: ${ALLOWED[$dir]:-itself}"
  done <"$file"
done < <(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | LC_ALL=C sort)

if [ $violations -gt 0 ]; then
  echo "include graph: $violations violation(s) in $files files" >&2
  exit 1
fi
echo "include graph OK: $files files, $includes includes"

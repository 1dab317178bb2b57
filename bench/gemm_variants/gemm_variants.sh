#!/usr/bin/env bash
# Tuning ct_gemm on a noisy machine: builds src/kernels/cpu/gemm.c (and gemm_pack.c) once per set
# of -D flags given, links them into one program with oneDNN's sgemm beside them (pair.c), and
# runs them call by call on the shapes given, printing each one's median time ratio to the first.
# The flags can set CT_KC, CT_MC, CT_NC (gemm_internal.h's blocks) or anything else gemm.c reads.
#
#   bench/gemm_variants/gemm_variants.sh [-r rounds] "flags0" ["flags1" ...] -- ta tb M N K [...]
#   e.g. ... "" "-DCT_NC=2048" -- 0 0 2048 2048 2048  0 1 1024 8192 256
# (rounds: 15 by default; the threads are OMP_NUM_THREADS's.) Builds in a temporary folder.
set -eu
cd "$(dirname "$0")/../.."
rounds=15
if [ "${1:-}" = -r ]; then rounds=$2; shift 2; fi
flags=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
[ "${1:-}" = -- ] || { echo "gemm_variants.sh: give the flag sets, then --, then the shapes" >&2; exit 2; }
shift
[ ${#flags[@]} -ge 1 ] && [ ${#flags[@]} -le 5 ] || { echo "gemm_variants.sh: 1 to 5 flag sets" >&2; exit 2; }
[ -f build/libctitan.a ] || { echo "gemm_variants.sh: build/libctitan.a is missing (run make)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc="${CC:-gcc} -O3 -march=native -std=c11 -D_GNU_SOURCE -fopenmp -Isrc"
objs=()
for i in "${!flags[@]}"; do
  ren="-Dct_gemm=ct_gemm_v$i -Dct_gemm_with_row_hooks=ct_gemm_rows_v$i -Dct_gemm_team_timing=ct_gemm_tt_v$i"
  ren="$ren -Dct_gemm_team_timing_read=ct_gemm_ttr_v$i -Dct_linear_forward=ct_lf_v$i -Dct_linear_backward=ct_lb_v$i"
  ren="$ren -Dct_gemm_pack_a=ct_gemm_pack_a_v$i -Dct_gemm_pack_b=ct_gemm_pack_b_v$i"
  ren="$ren -Dct_gemm_thread_buffers=ct_gemm_thread_buffers_v$i"  # its sizes follow the -D blocks
  for s in gemm gemm_pack gemm_buffers; do
    # shellcheck disable=SC2086  # the flags are words
    $cc $ren ${flags[$i]} -c "src/kernels/cpu/$s.c" -o "$tmp/${s}_v$i.o"
  done
  objs+=("$tmp/gemm_v$i.o" "$tmp/gemm_pack_v$i.o" "$tmp/gemm_buffers_v$i.o")
done
for j in $(seq ${#flags[@]} 4); do echo "void ct_gemm_v$j(void) {}" >>"$tmp/stubs.c"; done
[ -f "$tmp/stubs.c" ] || : >"$tmp/stubs.c"
$cc -o "$tmp/pair" bench/gemm_variants/pair.c "$tmp/stubs.c" "${objs[@]}" build/libctitan.a -ldnnl -lm
for i in "${!flags[@]}"; do echo "v$i: ${flags[$i]:-(as built)}"; done
"$tmp/pair" ${#flags[@]} "$rounds" "$@"

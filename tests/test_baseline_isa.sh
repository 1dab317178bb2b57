#!/usr/bin/env bash
# The default build runs on every x86-64-v3 machine: no object outside the kernel sets above avx2
# holds an instruction beyond x86-64-v3 (AVX2 + FMA). Scans the disassembly of every generic object
# and of the avx2 set for what only AVX-512 or AMX has -- zmm registers, xmm/ymm 16-31, opmask
# registers, AVX-512 BF16 and AMX instructions -- and checks that the scan finds them where they
# belong (the avx512 and amx sets), so that it cannot pass by finding nothing anywhere.
# A NATIVE=1 build (no kernel sets above its one) is for its own machine: nothing to check.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if [ ! -f "$BUILD/kset/avx2.o" ]; then
  echo "PASS baseline_isa (a NATIVE=1 build: built for its own machine)"
  exit 0
fi
BEYOND='%zmm|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|%k[0-7]\b|\b(vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16|ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilezero|tilerelease|tdpbf16ps|tdpbssd)\b'
beyond_in() { objdump -d --no-show-raw-insn "$1" | grep -E "$BEYOND" | head -3; }
fail=0
generic=$(find "$BUILD/src" -name '*.o' | sort)
n=0
for o in $generic "$BUILD/kset/avx2.o" "$BUILD/kset/dispatch.o"; do
  found=$(beyond_in "$o")
  n=$((n + 1))
  if [ -n "$found" ]; then
    echo "FAIL baseline_isa: $o holds instructions beyond x86-64-v3:"; echo "$found" | sed 's/^/    /'
    fail=1
  fi
done
[ "$fail" -eq 0 ] && echo "PASS baseline_isa ($n objects, none beyond x86-64-v3)"
# The scan sees what is there: zmm registers in the avx512 set, AMX tiles in the amx set.
if objdump -d --no-show-raw-insn "$BUILD/kset/avx512.o" | grep -qE '%zmm' &&
   objdump -d --no-show-raw-insn "$BUILD/kset/amx.o" | grep -qE '\btdpbf16ps\b' &&
   objdump -d --no-show-raw-insn "$BUILD/kset/avx512_bf16.o" | grep -qE '\bvdpbf16ps\b'; then
  echo "PASS baseline_isa_scan_sees (zmm in avx512, vdpbf16ps in avx512_bf16, tdpbf16ps in amx)"
else
  echo "FAIL baseline_isa_scan_sees: the scan did not find AVX-512 / AMX instructions in the sets that have them"
  fail=1
fi
exit $fail

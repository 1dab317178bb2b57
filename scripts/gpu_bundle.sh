#!/usr/bin/env bash
# Builds the CUDA binaries here and packs them for a GPU machine that has the NVIDIA driver,
# CUDA's runtime, cuBLASLt and NCCL but neither MPI nor oneDNN (a bare CUDA image): the bundle
# holds ctitan, tests/cuda's binaries, every shared library they and Open MPI's components need
# beyond glibc, the C++ runtime and CUDA's own, Open MPI's and PMIx's components, and env.sh,
# which points the loader and Open MPI at them (a singleton, isolated: no mpirun, no orted).
# The target needs the same CUDA major version as this machine's toolkit.
#   bash scripts/gpu_bundle.sh [OUT.tar.xz]            (default .gpu/bundle.tar.xz)
# (.gpu/ is ignored by git: copy the bundle to the GPU machine.)
# There:  tar xJf bundle.tar.xz -C /tmp/ctb && . /tmp/ctb/env.sh && bash /tmp/ctb/install.sh
# (install.sh copies the binaries into build-cuda/ for PREBUILT=1 bash scripts/gpu_check.sh).
set -eu
cd "$(dirname "$0")/.."
dest=${1:-.gpu/bundle.tar.xz}
B=build-cuda
make CUDA=1 BUILD="$B" CUDA_GENCODE="${CUDA_GENCODE:--gencode=arch=compute_90,code=sm_90}" -j"$(nproc)" \
  "$B/ctitan" "$B/tests/cuda/test_cuda_kernels" >/dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$B/ctitan" "$B"/tests/cuda/test_* "$stage/bin/"
strip "$stage/bin/"*
ompi_components=$(dirname "$(find /usr/lib -path '*openmpi*' -name 'mca_ess_singleton.so' | head -1)")
pmix_components=$(dirname "$(find /usr/lib -path '*pmix*' -name 'pmix_mca_*.so' | head -1)")
cp -rL "$ompi_components" "$stage/ompi"
cp -rL "$pmix_components" "$stage/pmix"
# Every library the binaries and components load, less the ones any Linux or CUDA install has.
for f in "$stage"/bin/* "$stage"/ompi/*.so "$stage"/pmix/*.so; do ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $3}'; done |
  sort -u | grep -vE '/(libc|libm|libpthread|librt|libdl|ld-linux[^/]*|libstdc\+\+|libgcc_s|libgomp)\.so|/cuda' |
  xargs -r cp -L -t "$stage/lib/"
cp "$(command -v orted)" "$stage/bin/" 2>/dev/null || true

cat >"$stage/env.sh" <<'EOF'
# Sourced on the GPU machine: the bundle's libraries first, then CUDA's and NCCL's where the
# machine keeps them (the toolkit, or the nvidia-* Python wheels).
ctb=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cuda_dirs=$(find /usr/local /opt /usr/lib -name 'libnccl.so.2' -o -name 'libcublasLt.so.1*' -o -name 'libcudart.so.1*' 2>/dev/null |
  xargs -r -n1 dirname | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$ctb/lib:${cuda_dirs}${LD_LIBRARY_PATH:-}"
export OMPI_MCA_mca_base_component_path="$ctb/ompi" PMIX_MCA_mca_base_component_path="$ctb/pmix"
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_orte_launch_agent="$ctb/bin/orted" OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
cat >"$stage/install.sh" <<'EOF'
# Run from the repository root: the bundle's binaries where scripts/gpu_check.sh looks for them.
ctb=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p build-cuda/tests/cuda
cp "$ctb/bin/ctitan" build-cuda/
for t in "$ctb"/bin/test_*; do cp "$t" build-cuda/tests/cuda/; done
EOF
mkdir -p "$(dirname "$dest")"
tar cJf "$dest" -C "$stage" .
echo "$dest: $(du -h "$dest" | cut -f1) ($(ls "$stage/lib" | wc -l) libraries, $(ls "$stage/ompi" | wc -l) MPI components)"

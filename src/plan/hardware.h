// Hardware profiles for the planner: what one device computes and holds, and the links between
// devices, read from plain TOML files in profiles/ (h100_sxm, h200, a100_80gb, b200, and
// this_machine, which `ctitan plan --calibrate` measures and writes).
//
// A "device" is what one rank runs on: a GPU, or on a CPU host one MPI rank. On a cpu profile
// the ranks of a run are all on one node (this machine) and share its cores: peaks and memory
// bandwidth are the node's, and the time model divides them among the ranks.
//
// File format (every key required unless marked optional; unknown keys are refused):
//   name = "H100 SXM 80GB"
//   kind = "gpu"                      # gpu | cpu
//   memory_gib = 80.0                 # per device
//   memory_headroom_gib = 4.0         # optional: kept free of the run's buffers (the CUDA context,
//                                     # NCCL's buffers, the allocator's fragmentation); default 0
//                                     # on cpu, on gpu 5% of memory_gib and at least 2
//   devices_per_node = 8
//   peak_tflops_fp32 = 67.0           # dense, per device (cpu: per node, all cores)
//   peak_tflops_bf16 = 989.0
//   peak_tflops_fp8 = 1979.0          # 0 when the device has no fp8 matmul
//   matmul_efficiency = 0.80          # fraction of peak the largest matmuls reach
//   matmul_half_size = 384            # the size (smallest of M, N, K) at which a matmul reaches
//                                     # half of that: efficiency = eff * s / (s + half)
//   attention_efficiency = 0.55       # flash attention's fraction of the matmul peak
//   attention_half_head_dim = 0       # optional: the head dimension at which attention reaches
//                                     # half of that (eff * HS / (HS + half)); 0 = any head
//                                     # dimension alike. A CPU's attention does its products
//                                     # over the head dimension, so small heads run slower.
//   memory_bandwidth_gbs = 3350       # elementwise kernels (norms, RoPE, SwiGLU, AdamW)
//   intra_node_bandwidth_gbs = 450    # per device, one direction (NVLink / shared memory)
//   intra_node_latency_us = 3
//   inter_node_bandwidth_gbs = 50     # per device (400 Gb/s InfiniBand = 50 GB/s)
//   inter_node_latency_us = 8
//   kernel_launch_us = 4              # optional: fixed cost per kernel (0 on cpu)
#ifndef CT_PLAN_HARDWARE_H
#define CT_PLAN_HARDWARE_H
#include <stdbool.h>

#include "core/error.h"

typedef struct {
    char name[64];
    char id[64];               // the file's stem: "h100_sxm"
    bool cpu;                  // kind = "cpu": ranks of a node share its compute
    double memory_bytes;       // per device
    double memory_headroom;    // bytes of memory_bytes the run's buffers must leave free (cpu: per node)
    int devices_per_node;      // gpu: GPUs per node; cpu: cores per node
    double peak_fp32, peak_bf16, peak_fp8;  // dense FLOP/s per device (cpu: per node)
    double matmul_efficiency, matmul_half_size, attention_efficiency, attention_half_head_dim;
    double memory_bandwidth;   // bytes/s per device (cpu: per node)
    double intra_bw, intra_latency;  // bytes/s per device, seconds
    double inter_bw, inter_latency;
    double kernel_launch;      // seconds per kernel
} ct_hw_profile;

// Reads a profile by id ("h100", "h100_sxm", "h200", "a100", "b200", "this_machine") from the
// profiles folder (CTITAN_PROFILES, else profiles/ beside the binary's source tree, else
// $XDG_CONFIG_HOME/ctitan/profiles), or a path to a .toml file. CT_ERR naming the file and key.
ct_status ct_hw_profile_load(const char *name_or_path, ct_hw_profile *hw);
// Writes a profile in the file format above (what --calibrate writes).
ct_status ct_hw_profile_write(const char *path, const ct_hw_profile *hw);
// Dense matmul peak for a compute dtype name: "fp32", "bf16", "fp8" (a device without fp8,
// peak_fp8 = 0, gives its bf16 peak: float8 runs there at the bf16 rate, plus its casts).
double ct_hw_peak(const ct_hw_profile *hw, const char *dtype);
// Attention's fraction of the matmul peak at this head dimension (attention_efficiency, scaled by
// HS / (HS + attention_half_head_dim) when that is set).
double ct_hw_attention_efficiency(const ct_hw_profile *hw, double head_dim);

// `ctitan plan --calibrate [--out FILE]`: measures this machine -- matmul peak (fp32, bf16) and
// the efficiency curve over sizes, attention throughput, memory bandwidth, and with 2+ ranks
// (mpirun -np 2 ctitan plan --calibrate) MPI bandwidth and latency between ranks -- and rank 0
// writes the profile (default profiles/this_machine.toml). Initialises and finalises MPI itself;
// prints what it measured. CT_ERR with one line.
ct_status ct_hw_calibrate(const char *out_path);  // NULL: profiles/this_machine.toml
#endif

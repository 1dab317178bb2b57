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
//   matmul_efficiency = 0.80          # fraction of the bf16 (and fp32) peak the best-shaped matmuls reach
//   matmul_efficiency_fp8 = 0.71      # optional: the same for the fp8 peak (default matmul_efficiency)
//   matmul_half_size = 384            # the size (smallest of M, N, K) at which a matmul reaches
//                                     # half of that: efficiency = eff * s / (s + half); 0 = none
//   sm_count = 132                    # optional, gpu: streaming multiprocessors. When set, a matmul's
//                                     # output tiles are quantised into waves over them and the
//                                     # matmul is held to the memory roofline (ct_hw_matmul_*)
//   matmul_tile_m = 128               # optional: the GEMM library's output tile (default 128 x 256)
//   matmul_tile_n = 256
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
//   intra_node_busbw_gbs = 370        # optional: NCCL's achieved bus bandwidth within a node for
//                                     # ring collectives, send/recv and all-to-all (default: the
//                                     # line rate, intra_node_bandwidth_gbs)
//   intra_node_allreduce_busbw_gbs = 480  # optional: the same for all-reduce (NVLink SHARP where the
//                                     # switch reduces; default intra_node_busbw_gbs)
//   inter_node_busbw_gbs = 47         # optional: the same across nodes (default the line rate)
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
    double matmul_efficiency_fp8;    // of peak_fp8; 0: matmul_efficiency
    double sm_count;                 // 0: no wave quantisation, no roofline (cpu, calibrated)
    double mm_tile_m, mm_tile_n;     // output tile of one thread block (0: 128 x 256)
    double memory_bandwidth;   // bytes/s per device (cpu: per node)
    double intra_bw, intra_latency;  // bytes/s per device, seconds
    double inter_bw, inter_latency;
    double kernel_launch;      // seconds per kernel
    double intra_busbw, intra_ar_busbw, inter_busbw;  // bytes/s of NCCL bus bandwidth; 0: see ct_hw_busbw
} ct_hw_profile;

// The collectives the time model charges, as NCCL runs them.
typedef enum { CT_HW_ALL_GATHER = 0, CT_HW_REDUCE_SCATTER, CT_HW_ALL_REDUCE, CT_HW_SEND_RECV, CT_HW_ALL_TO_ALL } ct_hw_coll;
// What the collective library achieves on a link at large sizes: nccl-tests' "bus bandwidth"
// (bytes/s each rank's link carries, protocol overhead included): the all-reduce figure for an
// all-reduce within a node, the ring figure for everything else; across nodes the inter-node one.
// A figure the profile leaves out is the line rate.
double ct_hw_busbw(const ct_hw_profile *hw, bool inter_node, ct_hw_coll coll);
// Bus bytes of a collective over a tensor of `bytes` (whole) on n ranks, as nccl-tests counts
// them: all-gather, reduce-scatter and all-to-all (n-1)/n of it, all-reduce 2(n-1)/n, send/recv
// all of it; 0 for n < 2.
double ct_hw_coll_bus_bytes(ct_hw_coll coll, int n, double bytes);
// Seconds of that collective: its steps (n-1; all-reduce 2(n-1); send/recv 1) times the link's
// latency plus its bus bytes over the link's bus bandwidth. The achieved bus bandwidth therefore
// grows with the message towards ct_hw_busbw, reaching half of it at steps x latency x busbw
// bytes. 0 when there is nothing to send.
double ct_hw_coll_seconds(const ct_hw_profile *hw, ct_hw_coll coll, int n, double bytes, bool inter_node);

// Reads a profile by id ("h100", "h100_sxm", "h200", "a100", "b200", "this_machine") from the
// profiles folder (CTITAN_PROFILES, else profiles/ beside the binary's source tree, else
// $XDG_CONFIG_HOME/ctitan/profiles), or a path to a .toml file. CT_ERR naming the file and key.
ct_status ct_hw_profile_load(const char *name_or_path, ct_hw_profile *hw);
// Writes a profile in the file format above (what --calibrate writes).
ct_status ct_hw_profile_write(const char *path, const ct_hw_profile *hw);
// Dense matmul peak for a compute dtype name: "fp32", "bf16", "fp8" (a device without fp8,
// peak_fp8 = 0, gives its bf16 peak: float8 runs there at the bf16 rate, plus its casts).
double ct_hw_peak(const ct_hw_profile *hw, const char *dtype);
// The matmul model. Fraction of the dtype's dense peak a GEMM C (M x N) = A (M x K) B (K x N)
// reaches from its arithmetic alone: the profile's efficiency for the dtype (fp8: the fp8 one),
// times s / (s + matmul_half_size) where that is set, times the wave quantisation where sm_count
// is set (ct_hw_matmul_waves).
double ct_hw_matmul_efficiency(const ct_hw_profile *hw, double M, double N, double K, bool fp8);
// The tile and wave quantisation of an (M x N) output on the profile's SMs: the output is cut
// into tiles, which run sm_count at a time; edge tiles reach past the output and the last wave
// runs part-full, each at a full one's cost. Returns M x N / (waves x sm_count x tile area) for
// the better of the two tile orientations (the library chooses its tile per shape), 1 where
// sm_count is 0. So a GEMM's arithmetic time is a step function of its shape, growing by whole
// waves.
double ct_hw_matmul_waves(const ct_hw_profile *hw, double M, double N);
// Seconds of that GEMM at `peak` FLOP/s (already the share of a device the rank has) with its
// operands `in_width` bytes an element and its output `out_width`: the longer of its arithmetic
// at ct_hw_matmul_efficiency and, where sm_count is set, its traffic (A and B read, C written
// once) at `mem_bw` bytes/s -- the roofline that holds small-K and skinny shapes.
double ct_hw_matmul_seconds(const ct_hw_profile *hw, double M, double N, double K, double peak, bool fp8,
                            double in_width, double out_width, double mem_bw);
// `groups` GEMMs of that shape in one kernel (a mixture-of-experts layer's experts): their tiles
// share the waves, so many small groups fill the SMs that one of them would leave idle.
double ct_hw_grouped_matmul_waves(const ct_hw_profile *hw, double groups, double M, double N);
double ct_hw_grouped_matmul_seconds(const ct_hw_profile *hw, double groups, double M, double N, double K, double peak,
                                    bool fp8, double in_width, double out_width, double mem_bw);
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

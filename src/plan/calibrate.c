// `ctitan plan --calibrate`: measures this machine into a cpu hardware profile (hardware.h).
//
//   matmul     fp32 through the cpu backend's peak probe (best of several runs of an n^3 sgemm)
//              at n = 64 .. 1536, on the curve rate(n) = peak * n / (n + half): peak_fp32 is the
//              best rate measured, matmul_efficiency 1, matmul_half_size the median over sizes of
//              the half that puts each on the curve. bf16: the bf16 probe at one size, scaled to
//              the same curve. Run it on a quiet machine: other work lowers every figure.
//   attention  the backend's attention forward + backward on a causal sequence, counted the way
//              the time model counts it (forward 4·T·(T/2)·NH·HS, backward 2.5x), as a fraction of
//              the fp32 peak; at two head sizes (16: the debug model; 64: bench M and real models),
//              geometric mean.
//   memory     a streaming kernel (y = a·x + y over 8 MiB arrays, all threads): the rate the
//              elementwise kernels see at activation sizes (the L3 may hold some of it).
//   MPI        with 2+ ranks: ping-pong between ranks 0 and 1 through the comm layer, 8 bytes for
//              latency (half the round trip) and 4 MiB for bandwidth.
// Everything runs with every core of the node on rank 0 while the other ranks wait asleep. mpirun
// binds each rank to one core by default (OpenMPI, -np at most the cores), so rank 0 first
// widens its own CPU affinity to every online core: bound, its threads shared one core, and the
// profile recorded one core's rate as the node's (the time model then predicted the debug
// model's steps 1.4-1.9 x too slow). About 20-40 seconds.
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "kernels/backend.h"
#include "plan/hardware.h"

static double fit_matmul(const ct_kernels *k, double *peak, double *eff, double *half) {
    static const long sizes[] = {64, 128, 192, 256, 384, 512, 768, 1024, 1536};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    double rate[NS], best = 0;
    for (int i = 0; i < NS; i++) {
        long n = sizes[i];
        int reps = n <= 256 ? 40 : n <= 768 ? 8 : 3;
        rate[i] = k->matmul_peak_gflops(n, reps) * 1e9;
        if (rate[i] > best) best = rate[i];
        printf("  fp32 matmul %4ld^3: %7.1f GFLOP/s\n", n, rate[i] / 1e9);
    }
    // The best rate is the plateau (efficiency 1 against it); each size gives the half size
    // that puts it on the curve, half_i = n_i (best / rate_i - 1), and the median of those is
    // kept: one size disturbed by other work on the machine moves it little (a least-squares
    // fit of 1/rate against 1/n was tried first and was thrown off by one slow size).
    double h[NS];
    for (int i = 0; i < NS; i++) h[i] = sizes[i] * (best / rate[i] - 1);
    for (int i = 1; i < NS; i++)
        for (int j = i; j > 0 && h[j] < h[j - 1]; j--) {
            double x = h[j];
            h[j] = h[j - 1], h[j - 1] = x;
        }
    *peak = best;
    *eff = 1.0;
    *half = h[NS / 2];
    return rate[NS - 2];  // at 1024, for the bf16 ratio
}

// Attention fwd + bwd seconds for one causal sequence of T tokens, best of reps.
static double attention_secs(const ct_kernels *k, long T, long NH, long HS, int reps) {
    long n = T * NH * HS;
    float *q = calloc((size_t)n, 4), *kk = calloc((size_t)n, 4), *v = calloc((size_t)n, 4), *o = calloc((size_t)n, 4);
    float *dq = calloc((size_t)n, 4), *dk = calloc((size_t)n, 4), *dv = calloc((size_t)n, 4), *dout = calloc((size_t)n, 4);
    float *lse = calloc((size_t)(T * NH), 4);
    long sf = k->attention_scratch_floats(T, T, HS);
    float *scratch = calloc((size_t)(sf > 0 ? sf : 1), 4);
    int32_t *pos = malloc((size_t)T * sizeof(int32_t));
    for (long i = 0; i < T; i++) pos[i] = (int32_t)i;
    for (long i = 0; i < n; i++) {
        q[i] = (float)((i * 7) % 13) * 0.01f;
        kk[i] = (float)((i * 5) % 11) * 0.01f;
        v[i] = (float)((i * 3) % 7) * 0.01f;
        dout[i] = (float)((i * 11) % 17) * 0.001f;
    }
    long ld = NH * HS;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {  // the first is a warm-up
        double t0 = omp_get_wtime();
        k->attention_forward(o, lse, q, ld, kk, ld, v, ld, pos, pos, NULL, NULL, 1, T, T, NH, NH, HS, scratch);
        k->attention_backward(dq, dk, dv, dout, o, lse, q, ld, kk, ld, v, ld, pos, pos, NULL, NULL, 1, T, T, NH, NH, HS, scratch);
        double dt = omp_get_wtime() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    free(q), free(kk), free(v), free(o), free(dq), free(dk), free(dv), free(dout), free(lse), free(scratch), free(pos);
    return best;
}

// Attention's efficiency at head dimensions 16 and 64, fitted as eff * HS / (HS + half): the
// plateau into *eff, the half point into *half. Two points fix both; when they do not fit that
// shape (the small heads not slower, or more than 4x slower), one efficiency for every head
// dimension (their geometric mean) and half = 0.
static void attention_eff(const ct_kernels *k, double peak, double *eff, double *half) {
    static const long shapes[][3] = {{1024, 16, 16}, {1024, 8, 64}};  // T, NH, HS
    double e[2], logsum = 0;
    for (int i = 0; i < 2; i++) {
        long T = shapes[i][0], NH = shapes[i][1], HS = shapes[i][2];
        double secs = attention_secs(k, T, NH, HS, 3);
        double flops = 3.5 * 4.0 * T * (T / 2.0) * NH * HS;  // the time model's count
        printf("  attention T %ld, %ld heads of %ld: %.1f GFLOP/s (model count), %.3f of the fp32 peak\n", T, NH, HS,
               flops / secs / 1e9, flops / secs / peak);
        logsum += log(e[i] = flops / secs / peak);
    }
    // r = e(16) / e(64) = (64 + h) / (4 (16 + h))  =>  h = 64 (1 - r) / (4 r - 1)
    double r = e[0] / e[1];
    *half = 0;
    *eff = fmin(1.0, exp(logsum / 2));
    if (r > 0.25 && r < 1) {
        *half = 64 * (1 - r) / (4 * r - 1);
        *eff = fmin(1.0, e[1] * (64 + *half) / 64);
    }
}

static double stream_bandwidth(void) {
    const long n = 2L << 20;  // 8 MiB per array
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    for (long i = 0; i < n; i++) x[i] = 1.0f, y[i] = 0.5f;
    double best = 1e30;
    for (int r = 0; r < 200; r++) {
        double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) y[i] = 0.999f * x[i] + y[i];
        double dt = omp_get_wtime() - t0;
        if (r > 2 && dt < best) best = dt;
    }
    double bw = 3.0 * n * 4 / best;  // x read, y read and written
    printf("  stream y = a x + y, 2 x 8 MiB: %.1f GB/s (check %g)\n", bw / 1e9, (double)y[n / 2]);
    free(x), free(y);
    return bw;
}

// Cores this thread may run on (`cores` when the kernel will not say).
static int allowed_cores(int cores) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : cores;
}

// Lets this thread, and the OpenMP threads it starts afterwards (none has started yet: threads
// keep the mask they were created with), run on every core it may use: every bit set, which
// the kernel narrows to the online cores of the process's cpuset. `bound`: how many it may run
// on now (allowed_cores).
static void unbind_from_cores(int cores, int bound) {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; c++) CPU_SET(c, &all);
    if (bound < cores && sched_setaffinity(0, sizeof all, &all) != 0)
        fprintf(stderr, "calibrate: bound to %d of %d cores and could not widen that; the figures are for %d\n",
                bound, cores, bound);
}

// Ranks 0 and 1: round trips of `bytes`; returns the best one-way seconds.
static double ping_pong(ct_group *g, size_t bytes, int reps) {
    char *buf = calloc(bytes, 1);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        if (g->rank == 0) {
            ct_comm_send(g, buf, bytes, CT_U8, 1, 7);
            ct_comm_recv(g, buf, bytes, CT_U8, 1, 8);
        } else if (g->rank == 1) {
            ct_comm_recv(g, buf, bytes, CT_U8, 0, 7);
            ct_comm_send(g, buf, bytes, CT_U8, 0, 8);
        }
        double dt = (omp_get_wtime() - t0) / 2;
        if (dt < best) best = dt;
    }
    free(buf);
    return best;
}

ct_status ct_hw_calibrate(const char *out_path) {
    int argc = 0;
    char **argv = NULL;
    if (ct_comm_init(&argc, &argv)) return CT_ERR;
    ct_group world;
    if (ct_comm_group_world(&world, 600)) return CT_ERR;
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    ct_hw_profile hw;
    memset(&hw, 0, sizeof hw);
    // MPI between ranks (defaults for one process: shared-memory figures typical of a host).
    double lat = 1e-6, bw = 5e9;
    if (world.size >= 2) {
        double small = ping_pong(&world, 8, 200);
        double big = ping_pong(&world, 4u << 20, 20);
        lat = small;
        bw = (4u << 20) / fmax(1e-9, big - small);
        if (world.rank == 0)
            printf("MPI ping-pong ranks 0-1: latency %.2f us, bandwidth %.2f GB/s\n", lat * 1e6, bw / 1e9);
    } else {
        printf("one process: MPI latency and bandwidth not measured (run under mpirun -np 2); using 1 us, 5 GB/s\n");
    }
    // The other ranks wait for rank 0's measurements asleep (a barrier's wait would yield-spin
    // for milliseconds at a time and take a core from the matmuls).
    ct_status st = CT_OK;
    char token = 0;
    if (world.rank != 0) {
        ct_comm_handle h = ct_comm_recv_start(&world, &token, 1, CT_U8, 0, 9);
        while (!ct_comm_test(&h)) usleep(2000);
    } else {
        int bound = allowed_cores(cores);
        unbind_from_cores(cores, bound);
        omp_set_num_threads(cores);
        const ct_kernels *k = ct_kernels_get("cpu");
        printf("calibrating this machine (%d cores): rank 0 runs on %d of them (bound to %d when it started)\n",
               cores, allowed_cores(cores), bound);
        double peak, eff, half;
        double r1024 = fit_matmul(k, &peak, &eff, &half);
        double bf16 = k->matmul_peak_gflops_bf16(1024, 3) * 1e9;
        printf("  bf16 matmul 1024^3: %.1f GFLOP/s (%s)\n", bf16 / 1e9, k->bf16_gemm_path ? k->bf16_gemm_path() : "");
        hw.cpu = true;
        snprintf(hw.name, sizeof hw.name, "this machine (%d cores)", cores);
        hw.devices_per_node = cores;
        hw.peak_fp32 = peak;
        hw.peak_bf16 = fmin(peak * 4, bf16 * peak / r1024);  // the same curve as fp32
        hw.peak_fp8 = 0;  // 8-bit matmuls are emulated: the time model uses the bf16 rate
        hw.matmul_efficiency = eff;
        hw.matmul_half_size = half;
        attention_eff(k, peak, &hw.attention_efficiency, &hw.attention_half_head_dim);
        hw.memory_bandwidth = stream_bandwidth();
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        hw.memory_bytes = 0.9 * (double)pages * (double)psize;
        hw.intra_bw = bw, hw.intra_latency = lat;
        hw.inter_bw = bw, hw.inter_latency = lat;  // one node: never used
        hw.kernel_launch = 0;
        const char *path = out_path ? out_path : "profiles/this_machine.toml";
        printf("fit: peak fp32 %.1f GFLOP/s, efficiency %.3f, half size %.0f; bf16 %.1f; attention %.3f, half head "
               "dim %.1f; memory %.1f GB/s\n", peak / 1e9, eff, half, hw.peak_bf16 / 1e9, hw.attention_efficiency,
               hw.attention_half_head_dim, hw.memory_bandwidth / 1e9);
        st = ct_hw_profile_write(path, &hw);
        if (st == CT_OK) printf("wrote %s\n", path);
        for (int r = 1; r < world.size; r++) ct_comm_send(&world, &token, 1, CT_U8, r, 9);
    }
    st = ct_comm_agree(&world, st);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    return st;
}

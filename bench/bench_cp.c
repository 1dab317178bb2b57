// Context parallel attention: load balance and bytes. Run under MPI, one thread per rank:
//   OMP_NUM_THREADS=1 mpirun -np 2 build/bench/bench_cp [T] [reps]      (and -np 4)
// All ranks form one cp group holding a sequence of T tokens (default 4096; B 1, 8 query heads,
// 2 kv heads, head size 64). For each rotate method (ring, allgather) x load balancer
// (headtail, none) it runs the attention op's forward + backward and prints:
//   - per rank, the CPU seconds spent inside the attention kernels (thread CPU time, so ranks
//     sharing a core on an oversubscribed machine are still compared by their own work), best
//     of `reps`; spread = max / min - 1 over ranks. Causal attention on a contiguous split gives
//     rank r (2r + 1) units of work, so its spread is about 2cp - 2 (cp 2: ~2, cp 4: ~6); head-tail
//     gives every rank the same 2cp units: the spread should be a few percent;
//   - the wall seconds of forward + backward on the slowest rank (with more ranks than cores it
//     includes waiting for a core, so only the CPU column measures balance there);
//   - the bytes one forward + backward added to the cp group's statistics, beside
//     ct_cp_expected_bytes (ratio 1.00 expected: the op moves exactly what the formula says).
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "comm/comm.h"
#include "core/clock.h"
#include "core/memory.h"
#include "parallel/context_parallel.h"

static const ct_kernels *cpu;
static double kernel_cpu_s;  // thread CPU seconds inside the attention kernels

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// The cpu table with the attention kernels timed: what the op calls, nothing else.
static void timed_forward(float *out, float *lse, const float *q, long ldq, const float *k, long ldk, const float *v,
                          long ldv, const int32_t *q_pos, const int32_t *k_pos, const int32_t *q_doc,
                          const int32_t *k_doc, long B, long Tq, long Tk, long NH,
                          long NKV, long HS, float *scratch) {
    double t0 = thread_cpu();
    cpu->attention_forward(out, lse, q, ldq, k, ldk, v, ldv, q_pos, k_pos, q_doc, k_doc, B, Tq, Tk, NH, NKV, HS, scratch);
    kernel_cpu_s += thread_cpu() - t0;
}

static void timed_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, long ldq, const float *k, long ldk, const float *v, long ldv,
                           const int32_t *q_pos, const int32_t *k_pos, const int32_t *q_doc,
                          const int32_t *k_doc, long B, long Tq, long Tk, long NH, long NKV,
                           long HS, float *scratch) {
    double t0 = thread_cpu();
    cpu->attention_backward(dq, dk, dv, dout, out, lse, q, ldq, k, ldk, v, ldv, q_pos, k_pos, q_doc, k_doc, B, Tq, Tk, NH, NKV, HS,
                            scratch);
    kernel_cpu_s += thread_cpu() - t0;
}

int main(int argc, char **argv) {
    if (ct_comm_init(&argc, &argv)) return 1;
    ct_group world, cpg;
    ct_comm_group_world(&world, 600);
    ct_comm_group_split(&world, 0, world.rank, "cp", &cpg);
    const long T = argc > 1 ? atol(argv[1]) : 4096, B = 1, NH = 8, NKV = 2, HS = 64;
    const int reps = argc > 2 ? atoi(argv[2]) : 3, P = cpg.size, r = cpg.rank;
    if (ct_cp_check_seq_len(CT_CP_HEADTAIL, P, T) != CT_OK) ct_fatal("bench_cp", "%s", ct_last_error());
    cpu = ct_kernels_get("cpu");
    static ct_kernels timed;
    timed = *cpu;
    timed.attention_forward = timed_forward;
    timed.attention_backward = timed_backward;

    // this rank's tokens in a fused qkv buffer (B, Tl, QKV), as the model holds them
    const long Tl = T / P, QKV = (NH + 2 * NKV) * HS;
    float *qkv = ct_mem_alloc(CT_MEM_ACTIVATIONS, sizeof(float) * B * Tl * QKV);
    float *dqkv = ct_mem_alloc(CT_MEM_ACTIVATIONS, sizeof(float) * B * Tl * QKV);
    float *out = ct_mem_alloc(CT_MEM_ACTIVATIONS, sizeof(float) * B * Tl * NH * HS);
    float *dout = ct_mem_alloc(CT_MEM_ACTIVATIONS, sizeof(float) * B * Tl * NH * HS);
    float *lse = ct_mem_alloc(CT_MEM_ACTIVATIONS, sizeof(float) * B * NH * Tl);
    int32_t *pos = malloc(sizeof(int32_t) * Tl);
    unsigned s = 12345u + (unsigned)r;
    for (long i = 0; i < B * Tl * QKV; i++) qkv[i] = (float)(rand_r(&s) % 2001 - 1000) * 1e-3f;
    for (long i = 0; i < B * Tl * NH * HS; i++) dout[i] = (float)(rand_r(&s) % 2001 - 1000) * 1e-3f;

    if (r == 0)
        printf("bench_cp: cp %d, B %ld, T %ld (T_local %ld), NH %ld, NKV %ld, HS %ld, OMP threads per rank %s, best "
               "of %d\n%-10s %-9s %-40s %8s %8s %12s %12s %6s\n",
               P, B, T, Tl, NH, NKV, HS, getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "(default)", reps,
               "method", "balance", "attention kernel CPU s per rank (f+b)", "spread", "wall s", "bytes/rank",
               "expected", "ratio");
    for (int rot = 0; rot < 2; rot++)
        for (int bal = 0; bal < 2; bal++) {
            ct_cp cp;
            if (ct_cp_init(&cp, &timed, &cpg, rot ? CT_CP_RING : CT_CP_ALLGATHER, (ct_cp_balance)bal, B, T, NH, NKV,
                           HS) != CT_OK)
                ct_fatal("bench_cp", "%s", ct_last_error());
            ct_stage_ops ops = ct_stage_ops_local(cpu);
            ct_cp_apply(&cp, &ops);
            ct_cp_positions((ct_cp_balance)bal, r, P, T, pos);
            float *scratch =
                ct_mem_alloc(CT_MEM_ACTIVATIONS, sizeof(float) * ops.attention.scratch_floats(ops.attention.ctx, Tl, Tl, HS));
            ct_attention_args a = {.B = B, .Tq = Tl, .Tk = Tl, .NH = NH, .NKV = NKV, .HS = HS, .q = qkv,
                                   .k = qkv + NH * HS, .v = qkv + (NH + NKV) * HS, .ldq = QKV, .ldk = QKV,
                                   .ldv = QKV, .q_pos = pos, .k_pos = pos, .out = out, .lse = lse,
                                   .scratch = scratch};
            double best_cpu = 1e30, best_wall = 1e30, bytes = 0;
            for (int it = 0; it <= reps; it++) {  // iteration 0 warms up
                ct_comm_barrier(&world);
                ct_comm_stats_reset(&cpg);
                kernel_cpu_s = 0;
                double t0 = ct_now_seconds();
                ops.attention.forward(ops.attention.ctx, &a);
                ops.attention.backward(ops.attention.ctx, &a, dout, dqkv, dqkv + NH * HS, dqkv + (NH + NKV) * HS);
                double wall = ct_now_seconds() - t0;
                bytes = ct_comm_stats_total_bytes(&cpg);
                if (it == 0) continue;
                best_cpu = kernel_cpu_s < best_cpu ? kernel_cpu_s : best_cpu;
                best_wall = wall < best_wall ? wall : best_wall;
            }
            double cpus[64], walls[64];
            ct_comm_all_gather(&world, &best_cpu, cpus, 1, CT_F64);
            ct_comm_all_gather(&world, &best_wall, walls, 1, CT_F64);
            const double expected = ct_cp_expected_bytes(&cp, true, false);
            if (r == 0) {
                char line[512];
                int n = 0;
                double mx = 0, mn = 1e30, wmax = 0;
                for (int i = 0; i < P; i++) {
                    n += snprintf(line + n, sizeof line - (size_t)n, "%.3f ", cpus[i]);
                    mx = cpus[i] > mx ? cpus[i] : mx;
                    mn = cpus[i] < mn ? cpus[i] : mn;
                    wmax = walls[i] > wmax ? walls[i] : wmax;
                }
                printf("%-10s %-9s %-40s %7.1f%% %8.3f %12.0f %12.0f %6.3f\n", rot ? "ring" : "allgather",
                       bal ? "none" : "headtail", line, 100 * (mx / mn - 1), wmax, bytes, expected,
                       expected > 0 ? bytes / expected : 0);
            }
            ct_mem_free(scratch);
            ct_cp_free(&cp);
        }
    if (r == 0)
        printf("(bytes: comm.h counts a point-to-point message at both ends, so the ring's figure is sent + "
               "received; the all-gather and reduce-scatter count what each rank sends)\n");
    ct_mem_free(qkv), ct_mem_free(dqkv), ct_mem_free(out), ct_mem_free(dout), ct_mem_free(lse);
    free(pos);
    ct_comm_group_free(&cpg);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    return 0;
}

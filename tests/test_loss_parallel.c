// Vocabulary-parallel output projection + cross-entropy (parallel/loss_parallel.h).
//
// Runs as an MPI test (tests/mpi_test.h): started plainly it checks the bad-input refusals and
// the scratch sizes, then re-runs itself under mpirun at 1, 2 and 4 ranks. Every rank builds the
// same global x (N, C), W (V, C) and targets (some -1) from one seed, takes its vocabulary slice
// of W, and compares against ct_xent_fused on the full W (itself tested against float64 in
// test_kernels_xent) and against a float64 loss written out here:
//   loss (same bits on every rank), dW_local = the matching rows of the full dW (accumulated
//   onto a non-zero start), SUM over ranks of dx = the full dx; both modes, chunk sizes that do
//   and do not divide N, forward only, large logits (x · 30), and the bytes each mode moves.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/comm.h"
#include "kernels/kernels.h"
#include "mpi_test.h"
#include "core/float_formats.h"
#include "test_bf16.h"
#include "test_rand.h"
#include "parallel/loss_parallel.h"

static ct_group world;
static const ct_kernels *kern;  // the cpu backend, the math under test


// One problem, identical on every rank (same seed).
typedef struct {
    long N, C, V;
    float *x, *W, *dW0;   // (N, C), (V, C), (V, C) starting value of dW (gradients accumulate)
    int32_t *tg;          // (N)
    long valid;
} problem;

static problem make_problem(long N, long C, long V, float xscale, uint64_t seed) {
    problem p = {N, C, V, malloc(sizeof(float) * N * C), malloc(sizeof(float) * V * C), malloc(sizeof(float) * V * C),
                 malloc(sizeof(int32_t) * N), 0};
    rng_state = seed;
    for (long i = 0; i < N * C; i++) p.x[i] = frand(xscale);
    for (long i = 0; i < V * C; i++) p.W[i] = frand(1), p.dW0[i] = frand(0.01f);
    for (long n = 0; n < N; n++) {
        p.tg[n] = urand() < 0.2 ? -1 : (int32_t)(urand() * V);
        p.valid += p.tg[n] >= 0;
    }
    return p;
}
static void free_problem(problem *p) { free(p->x), free(p->W), free(p->dW0), free(p->tg); }

// float64 loss: Σ over valid rows of log Σ_v exp(z_v) - z_t
static double ref_loss(const problem *p) {
    double loss = 0, *z = malloc(sizeof(double) * p->V);
    for (long n = 0; n < p->N; n++) {
        if (p->tg[n] < 0) continue;
        double mx = -INFINITY, s = 0;
        for (long v = 0; v < p->V; v++) {
            z[v] = 0;
            for (long c = 0; c < p->C; c++) z[v] += (double)p->x[n * p->C + c] * p->W[v * p->C + c];
            mx = z[v] > mx ? z[v] : mx;
        }
        for (long v = 0; v < p->V; v++) s += exp(z[v] - mx);
        loss += mx + log(s) - z[p->tg[n]];
    }
    free(z);
    return loss;
}

static int all_finite(const float *a, long n) {
    for (long i = 0; i < n; i++)
        if (!isfinite(a[i])) return 0;
    return 1;
}

// max |a - b| / max |b|
static double rel_err(const float *a, const float *b, long n) {
    double maxb = 1e-30, maxd = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        maxb = fabs(b[i]) > maxb ? fabs(b[i]) : maxb;
        maxd = d > maxd || isnan(d) ? (isnan(d) ? INFINITY : d) : maxd;
    }
    return maxd / maxb;
}

// One comparison: this rank's slice against the full fused kernel. bf16: both with bf16
// products, on inputs that hold bf16 values (as the model's do).
static void one_case_in(ct_group *tp, long N, long C, long V, long chunk, float xscale, bool gather, bool backward,
                        bool bf16) {
    problem p = make_problem(N, C, V, xscale, 0x9E3779B97F4A7C15ull + (uint64_t)(N * 131 + chunk));
    if (bf16) {
        for (long i = 0; i < N * C; i++) p.x[i] = round_bf16(p.x[i]);
        for (long i = 0; i < V * C; i++) p.W[i] = round_bf16(p.W[i]);
    }
    const int P = tp->size, rank = tp->rank;
    const long Vl = V / P, vs = rank * Vl;
    // Under bf16 the weight goes in as its bf16 copy (FSDP's gathered compute copy).
    uint16_t *W16 = malloc(sizeof(uint16_t) * V * C);
    ct_f32_to_bf16_n(p.W, W16, V * C);  // exact: W holds bf16 values
    const void *W_all = bf16 ? (const void *)W16 : p.W, *W_mine = bf16 ? (const void *)(W16 + vs * C) : p.W + vs * C;
    const float gs = 1.0f / (float)p.valid;
    // reference: the full vocabulary on this rank
    float *dx_ref = malloc(sizeof(float) * N * C), *dW_ref = malloc(sizeof(float) * V * C);
    float *ref_scratch = malloc(sizeof(float) * ct_xent_scratch_floats(chunk, V, C, bf16));
    memcpy(dW_ref, p.dW0, sizeof(float) * V * C);
    double loss_ref = ct_xent_fused(backward ? dx_ref : NULL, backward ? dW_ref : NULL, p.x, W_all, p.tg, N, C, V, gs,
                                    chunk, bf16, ref_scratch);
    // this rank's slice
    float *dx = malloc(sizeof(float) * N * C), *dWl = malloc(sizeof(float) * Vl * C);
    float *scratch = malloc(sizeof(float) * ct_xent_vocab_parallel_scratch_floats(kern, chunk, Vl, C, bf16, P, gather));
    for (long i = 0; i < N * C; i++) dx[i] = NAN;  // dx is overwritten
    memcpy(dWl, p.dW0 + vs * C, sizeof(float) * Vl * C);
    double loss = 0;  // the sum is added to it (kern is the cpu: its device memory is the host's)
    ct_xent_vocab_parallel(kern, &loss, backward ? dx : NULL, backward ? dWl : NULL, p.x, W_mine, p.tg, N, C, Vl,
                           vs, gs, chunk, bf16, scratch, tp, gather);

    CHECK(isfinite(loss), "loss %g", loss);
    CHECK_CLOSE(loss, loss_ref, 1e-5, 0);
    CHECK_CLOSE(loss, ref_loss(&p), 1e-5, 0);
    double losses[4];
    ct_comm_all_gather(tp, &loss, losses, 1, CT_F64);
    for (int r = 0; r < P; r++) CHECK(losses[r] == loss, "loss on rank %d %.17g vs mine %.17g", r, losses[r], loss);
    if (P == 1)  // a group of one is exactly the fused kernel
        CHECK(loss == loss_ref, "np1 loss %.17g vs fused %.17g", loss, loss_ref);
    if (backward) {
        CHECK(all_finite(dWl, Vl * C) && all_finite(dx, N * C), "non-finite gradient");
        double e = rel_err(dWl, dW_ref + vs * C, Vl * C);
        CHECK(e <= 1e-5, "dW_local rel err %g (gather %d chunk %ld)", e, gather, chunk);
        if (P == 1)
            CHECK(memcmp(dWl, dW_ref, sizeof(float) * V * C) == 0 && memcmp(dx, dx_ref, sizeof(float) * N * C) == 0,
                  "np1 gradients differ from the fused kernel");
        ct_comm_all_reduce(tp, dx, dx, (size_t)(N * C), CT_F32, CT_COMM_SUM);  // the caller's reduction
        e = rel_err(dx, dx_ref, N * C);
        CHECK(e <= 1e-5, "sum over tp of dx rel err %g (gather %d chunk %ld)", e, gather, chunk);
    }
    free(W16), free(dx_ref), free(dW_ref), free(ref_scratch), free(dx), free(dWl), free(scratch);
    free_problem(&p);
}

static void one_case(ct_group *tp, long N, long C, long V, long chunk, float xscale, bool gather, bool backward) {
    one_case_in(tp, N, C, V, chunk, xscale, gather, backward, false);
}

// Under bf16 compute the split products take bf16 inputs as the whole-vocabulary kernel's do
// (kernels/backend.h: ct_head_products): the same loss and gradients, both modes.
static void test_bf16_matches_full(void) {
    for (int g = 0; g < 2; g++) {
        one_case_in(&world, 36, 24, 64, 8, 1.0f, g, true, true);
        one_case_in(&world, 37, 24, 64, 50, 1.0f, g, false, true);
    }
}

static void test_loss_parallel_matches_full(void) {
    for (int back = 0; back < 2; back++) {
        one_case(&world, 36, 24, 64, 12, 1.0f, false, back);  // chunk divides N
        one_case(&world, 36, 24, 64, 8, 1.0f, false, back);   // last chunk of 4 rows
        one_case(&world, 37, 24, 64, 50, 1.0f, false, back);  // one chunk larger than N
    }
}

static void test_gather_matches_full(void) {
    for (int back = 0; back < 2; back++) {
        one_case(&world, 36, 24, 64, 12, 1.0f, true, back);
        one_case(&world, 36, 24, 64, 8, 1.0f, true, back);
        one_case(&world, 37, 24, 64, 50, 1.0f, true, back);
    }
}

// x · 30 gives logits of a few hundred: exp would overflow without the (global) max subtracted,
// and the ranks that do not hold the max see only underflowing exps.
static void test_large_logits(void) {
    for (int g = 0; g < 2; g++) {
        one_case(&world, 36, 24, 64, 8, 30.0f, g, true);
        one_case(&world, 36, 24, 64, 8, 30.0f, g, false);
    }
}

// Loss parallel moves per-row numbers only: a MAX all-reduce of R floats and a SUM all-reduce
// of 2R per chunk, 2(P-1)/P · 12 bytes per row in all (ring volume, comm.h) -- under the
// N·V_local·4 bytes of this rank's logits. Gather mode all-gathers the logits: (P-1)·N·V_local·4.
static void test_bytes_moved(void) {
    const long N = 36, C = 24, V = 64, chunk = 8, nchunks = 5;
    ct_group tp;
    CHECK(ct_comm_group_split(&world, 0, world.rank, "tp", &tp) == CT_OK, "%s", ct_last_error());
    const double P = tp.size;
    const long Vl = V / tp.size;
    problem p = make_problem(N, C, V, 1.0f, 7);
    float *dx = malloc(sizeof(float) * N * C), *dWl = calloc((size_t)(Vl * C), sizeof(float));
    float *scratch =
        malloc(sizeof(float) * ct_xent_vocab_parallel_scratch_floats(kern, chunk, Vl, C, false, tp.size, true));
    const float *Wl = p.W + tp.rank * Vl * C;
    double loss = 0;

    ct_comm_stats_reset(&tp);
    ct_xent_vocab_parallel(kern, &loss, dx, dWl, p.x, Wl, p.tg, N, C, Vl, tp.rank * Vl, 1.0f, chunk, false, scratch, &tp,
                           false);
    double lp = ct_comm_stats_total_bytes(&tp);
    CHECK(lp < (double)N * Vl * 4, "loss parallel moved %g bytes, logits are %ld", lp, N * Vl * 4);
    CHECK_CLOSE(lp, 2 * (P - 1) / P * 12 * N, 1e-12, 0);
    CHECK(tp.stats[CT_COMM_ALL_REDUCE].calls == (P > 1 ? 2 * nchunks : 0), "all-reduce calls %lld",
          tp.stats[CT_COMM_ALL_REDUCE].calls);
    CHECK(tp.stats[CT_COMM_ALL_GATHER].calls == 0, "loss parallel must not gather");

    ct_comm_stats_reset(&tp);
    ct_xent_vocab_parallel(kern, &loss, dx, dWl, p.x, Wl, p.tg, N, C, Vl, tp.rank * Vl, 1.0f, chunk, false, scratch, &tp,
                           true);
    double ga = ct_comm_stats_total_bytes(&tp);
    CHECK(ga >= (P - 1) * N * Vl * 4, "gather moved %g bytes", ga);
    CHECK_CLOSE(ga, (P - 1) * N * Vl * 4, 1e-12, 0);
    if (P > 1) CHECK(ga > lp, "gather %g vs loss parallel %g", ga, lp);
    free(dx), free(dWl), free(scratch);
    free_problem(&p);
    ct_comm_group_free(&tp);
}

// ---- pure cases (no MPI): scratch sizes and refusals --------------------------------------------

static void test_scratch_sizes(void) {
    // loss parallel: one chunk of local logits + 3 floats per row, whatever tp is
    CHECK(ct_xent_vocab_parallel_scratch_floats(kern, 8, 16, 4, false, 4, false) == 8 * 16 + 3 * 8, "loss parallel");
    // gather: tp copies of the chunk's local logits
    CHECK(ct_xent_vocab_parallel_scratch_floats(kern, 8, 16, 4, false, 4, true) == 4 * 8 * 16 + 3 * 8, "gather");
    // a group of one calls ct_xent_fused: its scratch must fit
    CHECK(
        ct_xent_vocab_parallel_scratch_floats(kern, 8, 64, 4, true, 1, true) >= ct_xent_scratch_floats(8, 64, 4, true),
        "tp 1");
    CHECK(ct_xent_vocab_parallel_scratch_floats(kern, 8, 64, 4, false, 1, false) >=
              ct_xent_scratch_floats(8, 64, 4, false),
          "tp 1");
}

// Runs the call in a child process with a group that says (rank 1 of 2) but was never connected:
// every check happens before any communication, so the child must exit non-zero with a message.
static int refused(long N, long V_local, long vocab_start, long chunk, int32_t bad_target, int drop_dW, char *msg,
                   size_t msgn) {
    int fd[2];
    if (pipe(fd) != 0) return 0;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        ct_group g;
        memset(&g, 0, sizeof g);
        strcpy(g.name, "tp");
        g.rank = 1, g.size = 2;
        float x[8] = {0}, W[16] = {0}, dx[8], dW[16] = {0}, scratch[64];
        int32_t tg[2] = {0, bad_target};
        double loss = 0;
        ct_xent_vocab_parallel(kern, &loss, dx, drop_dW ? NULL : dW, x, W, tg, N, 4, V_local, vocab_start, 1.0f, chunk, false,
                               scratch, &g, false);
        _exit(0);
    }
    close(fd[1]);
    ssize_t n = read(fd[0], msg, msgn - 1);
    msg[n > 0 ? n : 0] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(msg, "ct_xent_vocab_parallel") != NULL;
}

static void test_bad_inputs(void) {
    char msg[512];
    // rank 1 of 2 with V_local 4 holds [4, 8): valid arguments with no rows (so nothing to
    // communicate) return cleanly -- the control that the refusals below are about their one flaw
    CHECK(!refused(0, 4, 4, 2, 7, 0, msg, sizeof msg), "valid call refused: %s", msg);
    CHECK(refused(2, 4, 4, 2, 8, 0, msg, sizeof msg) && strstr(msg, "target 8"), "target = V accepted: %s", msg);
    CHECK(refused(2, 4, 4, 2, -2, 0, msg, sizeof msg) && strstr(msg, "target -2"), "target -2 accepted: %s", msg);
    CHECK(refused(2, 4, 0, 2, 1, 0, msg, sizeof msg) && strstr(msg, "vocab_start 0"), "bad vocab_start: %s", msg);
    CHECK(refused(2, 4, 4, 0, 5, 0, msg, sizeof msg) && strstr(msg, "chunk_rows 0"), "chunk 0: %s", msg);
    CHECK(refused(-1, 4, 4, 2, 5, 0, msg, sizeof msg) && strstr(msg, "N -1"), "N -1: %s", msg);
    CHECK(refused(2, 0, 0, 2, -1, 0, msg, sizeof msg) && strstr(msg, "V_local 0"), "V_local 0: %s", msg);
    CHECK(refused(2, 4, 4, 2, 5, 1, msg, sizeof msg) && strstr(msg, "dW_local"), "dx without dW: %s", msg);
}

int main(int argc, char **argv) {
    kern = ct_kernels_get("cpu");
    if (!ct_mpi_test_is_child(argc, argv)) {
        CT_RUN(test_scratch_sizes);
        CT_RUN(test_bad_inputs);
        // 2 threads per rank at np 2 exercises the OpenMP row loops; 1 at np 4 (few cores).
        const int nps[3] = {1, 2, 4}, threads[3] = {2, 2, 1};
        for (int i = 0; i < 3; i++) {
            char t[8];
            snprintf(t, sizeof t, "%d", threads[i]);
            setenv("OMP_NUM_THREADS", t, 1);
            int rc = ct_mpi_test_spawn(argv[0], nps[i], 240, NULL);
            if (rc != 0) {
                printf("FAIL mpirun_np%d: exit %d\n", nps[i], rc);
                ct_test_failures++;
            }
        }
        CT_TEST_EXIT();
    }
    if (ct_comm_init(&argc, &argv) != CT_OK || ct_comm_group_world(&world, 30) != CT_OK) {
        printf("FAIL init: %s\n", ct_last_error());
        return 1;
    }
    CT_MPI_RUN(test_loss_parallel_matches_full);
    CT_MPI_RUN(test_gather_matches_full);
    CT_MPI_RUN(test_large_logits);
    CT_MPI_RUN(test_bf16_matches_full);
    CT_MPI_RUN(test_bytes_moved);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}

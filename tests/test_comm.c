// Tests of comm/comm.h (MPI backend).
//
// How this program runs (see tests/mpi_test.h): started plainly, as tests/run_tests.sh does,
// it re-runs itself under `mpirun -np N ... --child` for N = 1, 2, 3, 4 and every case runs
// at each size. Each collective is checked against values computed locally in double from the
// same generator every rank uses (f below), with buffer sizes that do not divide by N.
//
// `--scenario NAME` modes are failure drills driven by tests/test_comm.sh (they end the job on
// purpose): timeout, fatal, kill, mpierror, badpeer, rsoverlap, u8reduce.
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/backend.h"
#include "comm/comm.h"
#include "mpi_test.h"

static ct_group world;

// The value rank r contributes at index i: uneven, signed, different per rank and per index.
static float f(int r, long i) { return (float)(sin(0.37 * (double)i + 1.3 * r) * (1.0 + 0.5 * r)); }
static int32_t fi(int r, long i) { return (int32_t)((i * 7 + r * 13) % 23) - 11; }

static void test_all_reduce_sum_f32(void) {
    const long n = 37;  // not a multiple of 2, 3 or 4
    float a[37], b[37];
    for (long i = 0; i < n; i++) a[i] = f(world.rank, i);
    ct_comm_all_reduce(&world, a, b, n, CT_F32, CT_COMM_SUM);
    ct_comm_all_reduce(&world, a, a, n, CT_F32, CT_COMM_SUM);  // in place
    for (long i = 0; i < n; i++) {
        double ref = 0;
        for (int r = 0; r < world.size; r++) ref += f(r, i);
        CHECK_CLOSE(b[i], ref, 1e-5, 1e-6);
        CHECK_CLOSE(a[i], ref, 1e-5, 1e-6);
    }
}

static void test_all_reduce_max_and_other_dtypes(void) {
    const long n = 29;
    float m[29];
    double d[29];
    int32_t s32[29], m32[29];
    int64_t s64[29];
    for (long i = 0; i < n; i++) {
        m[i] = f(world.rank, i);
        d[i] = 1e-3 * f(world.rank, i) + 1e9;  // needs double precision to survive
        s32[i] = m32[i] = fi(world.rank, i);
        s64[i] = (int64_t)fi(world.rank, i) * 1000000000LL;
    }
    ct_comm_all_reduce(&world, m, m, n, CT_F32, CT_COMM_MAX);
    ct_comm_all_reduce(&world, d, d, n, CT_F64, CT_COMM_SUM);
    ct_comm_all_reduce(&world, s32, s32, n, CT_I32, CT_COMM_SUM);
    ct_comm_all_reduce(&world, m32, m32, n, CT_I32, CT_COMM_MAX);
    ct_comm_all_reduce(&world, s64, s64, n, CT_I64, CT_COMM_SUM);
    for (long i = 0; i < n; i++) {
        float mref = -INFINITY;
        double dref = 0;
        int32_t sref = 0, mxref = INT32_MIN;
        int64_t s64ref = 0;
        for (int r = 0; r < world.size; r++) {
            mref = fmaxf(mref, f(r, i));
            dref += 1e-3 * f(r, i) + 1e9;
            sref += fi(r, i);
            mxref = fi(r, i) > mxref ? fi(r, i) : mxref;
            s64ref += (int64_t)fi(r, i) * 1000000000LL;
        }
        CHECK(m[i] == mref, "max[%ld] %g vs %g", i, m[i], mref);
        CHECK_CLOSE(d[i], dref, 1e-15, 1e-9);
        CHECK(s32[i] == sref, "i32 sum[%ld] %d vs %d", i, s32[i], sref);
        CHECK(m32[i] == mxref, "i32 max[%ld] %d vs %d", i, m32[i], mxref);
        CHECK(s64[i] == s64ref, "i64 sum[%ld]", i);
    }
}

static void test_all_gather(void) {
    enum { C = 5 };
    const int N = world.size;
    float send[C], out[4 * C], inplace[4 * C];
    uint16_t bsend[C], bout[4 * C];  // bf16 payload: moved bit for bit
    for (int i = 0; i < C; i++) {
        send[i] = f(world.rank, i);
        bsend[i] = (uint16_t)(0x3f80 + 17 * world.rank + i);
    }
    for (int i = 0; i < N * C; i++) inplace[i] = -1;
    memcpy(inplace + world.rank * C, send, sizeof send);
    ct_comm_all_gather(&world, send, out, C, CT_F32);
    ct_comm_all_gather(&world, inplace + world.rank * C, inplace, C, CT_F32);
    ct_comm_all_gather(&world, bsend, bout, C, CT_BF16);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < C; i++) {
            CHECK(out[r * C + i] == f(r, i), "gather r%d i%d", r, i);
            CHECK(inplace[r * C + i] == f(r, i), "in-place gather r%d i%d", r, i);
            CHECK(bout[r * C + i] == (uint16_t)(0x3f80 + 17 * r + i), "bf16 gather r%d i%d", r, i);
        }
}

static void test_reduce_scatter(void) {
    enum { C = 7 };
    const int N = world.size;
    float send[4 * C], sum[C], mx[C];
    for (int i = 0; i < N * C; i++) send[i] = f(world.rank, i);
    ct_comm_reduce_scatter(&world, send, sum, C, CT_F32, CT_COMM_SUM);
    ct_comm_reduce_scatter(&world, send, mx, C, CT_F32, CT_COMM_MAX);
    for (int i = 0; i < C; i++) {
        long gi = (long)world.rank * C + i;  // my chunk of the (N, C) input
        double ref = 0;
        float mref = -INFINITY;
        for (int r = 0; r < N; r++) {
            ref += f(r, gi);
            mref = fmaxf(mref, f(r, gi));
        }
        CHECK_CLOSE(sum[i], ref, 1e-5, 1e-6);
        CHECK(mx[i] == mref, "max chunk %d: %g vs %g", i, mx[i], mref);
    }
}

static void test_broadcast(void) {
    enum { C = 11 };
    for (int root = 0; root < world.size; root++) {
        int32_t buf[C];
        float fb[C];
        for (int i = 0; i < C; i++) {
            buf[i] = fi(world.rank, i);
            fb[i] = f(world.rank, i);
        }
        ct_comm_broadcast(&world, buf, C, CT_I32, root);
        ct_comm_broadcast(&world, fb, C, CT_F32, root);
        for (int i = 0; i < C; i++) {
            CHECK(buf[i] == fi(root, i), "root %d i %d", root, i);
            CHECK(fb[i] == f(root, i), "root %d i %d", root, i);
        }
    }
}

// A ring: each rank sends to the next and receives from the previous. Receives are started
// first (non-blocking) so no ordering can deadlock, even at N = 1 (a rank sending to itself).
static void test_send_recv_ring(void) {
    enum { C = 9 };
    const int N = world.size, next = (world.rank + 1) % N, prev = (world.rank + N - 1) % N;
    float out[C], in[C], in2[C];
    for (int i = 0; i < C; i++) out[i] = f(world.rank, i);
    ct_comm_handle rh = ct_comm_recv_start(&world, in, C, CT_F32, prev, 3);
    ct_comm_handle sh = ct_comm_send_start(&world, out, C, CT_F32, next, 3);
    ct_comm_wait(&sh);
    ct_comm_wait(&rh);
    for (int i = 0; i < C; i++) CHECK(in[i] == f(prev, i), "ring i %d", i);
    // Blocking send/recv between pairs (0,1), (2,3): even ranks send first.
    if (N >= 2 && !(N % 2 == 1 && world.rank == N - 1)) {
        int peer = world.rank ^ 1;
        if (world.rank % 2 == 0) {
            ct_comm_send(&world, out, C, CT_F32, peer, 4);
            ct_comm_recv(&world, in2, C, CT_F32, peer, 5);
        } else {
            ct_comm_recv(&world, in2, C, CT_F32, peer, 4);
            ct_comm_send(&world, out, C, CT_F32, peer, 5);
        }
        for (int i = 0; i < C; i++) CHECK(in2[i] == f(peer, i), "pair i %d", i);
    }
}

// Several collectives in flight at once on one group, waited in reverse order, one finished
// through ct_comm_test.
static void test_nonblocking(void) {
    enum { A = 13, G = 3, R = 6, B = 4 };
    const int N = world.size;
    float ar[A], ag_in[G], ag[4 * G], rs_in[4 * R], rs[R], bc[B];
    for (int i = 0; i < A; i++) ar[i] = f(world.rank, i);
    for (int i = 0; i < G; i++) ag_in[i] = f(world.rank, 100 + i);
    for (int i = 0; i < N * R; i++) rs_in[i] = f(world.rank, 200 + i);
    for (int i = 0; i < B; i++) bc[i] = f(world.rank, 300 + i);
    ct_comm_handle h[4];
    h[0] = ct_comm_all_reduce_start(&world, ar, ar, A, CT_F32, CT_COMM_SUM);
    h[1] = ct_comm_all_gather_start(&world, ag_in, ag, G, CT_F32);
    h[2] = ct_comm_reduce_scatter_start(&world, rs_in, rs, R, CT_F32, CT_COMM_SUM);
    h[3] = ct_comm_broadcast_start(&world, bc, B, CT_F32, N - 1);
    ct_comm_wait(&h[3]);
    ct_comm_wait(&h[2]);
    ct_comm_wait(&h[1]);
    while (!ct_comm_test(&h[0])) {
    }
    CHECK(h[0].group == NULL && ct_comm_test(&h[0]), "a finished handle stays finished");
    ct_comm_wait(&h[0]);  // waiting again is a no-op
    for (int i = 0; i < A; i++) {
        double ref = 0;
        for (int r = 0; r < N; r++) ref += f(r, i);
        CHECK_CLOSE(ar[i], ref, 1e-5, 1e-6);
    }
    for (int r = 0; r < N; r++)
        for (int i = 0; i < G; i++) CHECK(ag[r * G + i] == f(r, 100 + i), "ag r%d i%d", r, i);
    for (int i = 0; i < R; i++) {
        double ref = 0;
        for (int r = 0; r < N; r++) ref += f(r, 200 + world.rank * R + i);
        CHECK_CLOSE(rs[i], ref, 1e-5, 1e-6);
    }
    for (int i = 0; i < B; i++) CHECK(bc[i] == f(N - 1, 300 + i), "bc i%d", i);
}

// Groups made by split: even and odd world ranks. Values checked against the members' f.
static void test_split_groups(void) {
    ct_group g;
    CHECK(ct_comm_group_split(&world, world.rank % 2, world.rank, "parity", &g) == CT_OK, "%s",
          ct_last_error());
    int members = 0;
    for (int r = world.rank % 2; r < world.size; r += 2) members++;
    CHECK(g.size == members, "size %d vs %d", g.size, members);
    CHECK(g.rank == world.rank / 2, "rank %d", g.rank);
    CHECK(strcmp(g.name, "parity") == 0 && g.timeout_s == world.timeout_s, "name/timeout");
    float v[3] = {f(world.rank, 0), f(world.rank, 1), f(world.rank, 2)};
    ct_comm_all_reduce(&g, v, v, 3, CT_F32, CT_COMM_SUM);
    for (int i = 0; i < 3; i++) {
        double ref = 0;
        for (int r = world.rank % 2; r < world.size; r += 2) ref += f(r, i);
        CHECK_CLOSE(v[i], ref, 1e-5, 1e-6);
    }
    ct_comm_group_free(&g);
}

// Byte counters against the formulas of comm.h, written out here independently.
// All-to-all-v as expert parallelism uses it: rank r sends rank p (r + 2p) % 3 values (some
// zero), the counts go round first, then the values, blocking and started; each value says who
// sent it and where it was, so a misplaced one is seen. The statistics count the bytes sent to
// other ranks only.
static int a2a_count(int from, int to) { return (from + 2 * to) % 3; }
static float a2a_value(int from, int to, int i) { return (float)(1000 * from + 10 * to + i); }

static void test_all_to_all_v(void) {
    int n = world.size, me = world.rank;
    size_t sc[8] = {0}, sd[8] = {0}, rc[8] = {0}, rd[8] = {0}, want_rc[8] = {0};
    int64_t sc64[8] = {0}, rc64[8] = {0};
    float send[64], recv[64];
    size_t at = 0;
    for (int p = 0; p < n; p++) {
        sc[p] = (size_t)a2a_count(me, p), sd[p] = at;
        for (size_t i = 0; i < sc[p]; i++) send[at + i] = a2a_value(me, p, (int)i);
        at += sc[p];
        want_rc[p] = (size_t)a2a_count(p, me);
    }
    ct_comm_stats_reset(&world);
    for (int p = 0; p < n; p++) sc64[p] = (int64_t)sc[p];
    ct_comm_all_to_all(&world, sc64, rc64, 1, CT_I64);
    for (int p = 0; p < n; p++) rc[p] = (size_t)rc64[p];
    CHECK(!memcmp(rc, want_rc, (size_t)n * sizeof(size_t)), "exchanged counts differ");
    at = 0;
    for (int p = 0; p < n; p++) rd[p] = at, at += rc[p];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 64; i++) recv[i] = -1;
        if (round == 0) {
            ct_comm_all_to_all_v(&world, send, sc, sd, recv, rc, rd, CT_F32);
        } else {
            ct_comm_handle h = ct_comm_all_to_all_v_start(&world, send, sc, sd, recv, rc, rd, CT_F32);
            ct_comm_wait(&h);
        }
        int bad = 0;
        for (int p = 0; p < n; p++)
            for (size_t i = 0; i < rc[p]; i++) bad += recv[rd[p] + i] != a2a_value(p, me, (int)i);
        CHECK(bad == 0, "round %d: %d values misplaced", round, bad);
    }
    double sent = 0;
    for (int p = 0; p < n; p++)
        if (p != me) sent += 2.0 * (double)sc[p] * sizeof(float);  // two rounds
    for (int p = 0; p < n; p++)
        if (p != me) sent += (double)sizeof(int64_t);  // the counts
    CHECK(world.stats[CT_COMM_ALL_TO_ALL].calls == 3, "calls %lld", world.stats[CT_COMM_ALL_TO_ALL].calls);
    CHECK_CLOSE(world.stats[CT_COMM_ALL_TO_ALL].bytes, sent, 1e-12, 0);
}

static void test_stats(void) {
    ct_group g;
    CHECK(ct_comm_group_split(&world, 0, world.rank, "stats", &g) == CT_OK, "%s", ct_last_error());
    const double N = g.size;
    float buf[4 * 41], out[4 * 41];
    memset(buf, 0, sizeof buf);
    ct_comm_all_reduce(&g, buf, buf, 41, CT_F32, CT_COMM_SUM);
    ct_comm_all_reduce(&g, buf, out, 10, CT_F32, CT_COMM_MAX);
    ct_comm_handle h = ct_comm_all_gather_start(&g, buf, out, 41, CT_F32);
    ct_comm_wait(&h);
    ct_comm_reduce_scatter(&g, buf, out, 17, CT_F32, CT_COMM_SUM);
    double dd[3] = {0, 0, 0};
    ct_comm_broadcast(&g, dd, 3, CT_F64, 0);
    ct_comm_barrier(&g);
    const ct_comm_stat *s = g.stats;
    double ar = 2 * (N - 1) / N * (41 * 4) + 2 * (N - 1) / N * (10 * 4);
    CHECK(s[CT_COMM_ALL_REDUCE].calls == 2, "calls %lld", s[CT_COMM_ALL_REDUCE].calls);
    CHECK_CLOSE(s[CT_COMM_ALL_REDUCE].bytes, ar, 1e-12, 0);
    CHECK(s[CT_COMM_ALL_GATHER].calls == 1, "ag calls");
    CHECK_CLOSE(s[CT_COMM_ALL_GATHER].bytes, (N - 1) / N * (N * 41 * 4), 1e-12, 0);
    CHECK(s[CT_COMM_REDUCE_SCATTER].calls == 1, "rs calls");
    CHECK_CLOSE(s[CT_COMM_REDUCE_SCATTER].bytes, (N - 1) / N * (N * 17 * 4), 1e-12, 0);
    CHECK(s[CT_COMM_BROADCAST].calls == 1, "bc calls");
    CHECK_CLOSE(s[CT_COMM_BROADCAST].bytes, N > 1 ? 3 * 8 : 0, 0, 0);
    CHECK(s[CT_COMM_BARRIER].calls == 1 && s[CT_COMM_BARRIER].bytes == 0, "barrier");
    CHECK(s[CT_COMM_SEND].calls == 0 && s[CT_COMM_RECV].calls == 0, "no p2p");
    double total = 0;
    for (int k = 0; k < CT_COMM_NKINDS; k++) {
        CHECK(s[k].wait_s >= 0 && s[k].wait_s < 60, "wait %g", s[k].wait_s);
        total += s[k].bytes;
    }
    CHECK_CLOSE(ct_comm_stats_total_bytes(&g), total, 1e-12, 0);
    // p2p: a ring on this group; sends count bytes sent, recvs bytes received.
    int next = (g.rank + 1) % g.size, prev = (g.rank + g.size - 1) % g.size;
    ct_comm_handle rh = ct_comm_recv_start(&g, out, 6, CT_I32, prev, 0);
    ct_comm_handle sh = ct_comm_send_start(&g, buf, 6, CT_I32, next, 0);
    ct_comm_wait(&sh);
    ct_comm_wait(&rh);
    CHECK(s[CT_COMM_SEND].calls == 1 && s[CT_COMM_SEND].bytes == 24, "send");
    CHECK(s[CT_COMM_RECV].calls == 1 && s[CT_COMM_RECV].bytes == 24, "recv");

    char text[1024];
    int len = ct_comm_stats_format(&g, text, sizeof text);
    CHECK(len > 0 && (size_t)len < sizeof text, "len %d", len);
    CHECK(strstr(text, "comm stats all_reduce: calls 2, bytes ") != NULL, "%s", text);
    CHECK(strstr(text, "comm stats barrier: calls 1, bytes 0, wait ") != NULL, "%s", text);
    char small[8];
    CHECK(ct_comm_stats_format(&g, small, sizeof small) == len && strlen(small) == 7, "truncation");
    ct_comm_stats_reset(&g);
    CHECK(ct_comm_stats_total_bytes(&g) == 0 && g.stats[CT_COMM_ALL_REDUCE].calls == 0, "reset");
    CHECK(ct_comm_stats_format(&g, text, sizeof text) == 0, "empty after reset");
    ct_comm_group_free(&g);
}

// ---- bf16 reductions -----------------------------------------------------------------------
// Expected values are worked out here from bit patterns and double arithmetic, never with
// core/float_formats.h (the code under test rounds with it).

static float bf(uint16_t b) {  // a bf16 is the top half of an fp32
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// The bf16 bits of x, which must be exactly representable (the low 16 fp32 bits are zero).
static uint16_t bf_exact(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    CHECK((u & 0xffffu) == 0, "%.9g is not a bf16 value", x);
    return (uint16_t)(u >> 16);
}

static bool bf_isnan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// Integers in [-20, 20] scaled by 2^((i % 9) - 4): any partial sum over <= 4 ranks, in any
// order, is an integer of magnitude <= 80 (< 2^8) times the same power of two, so it is
// representable in bf16 and every combine is exact whatever order MPI picks.
static float bf_val(int r, long i) {
    return (float)(((i * 5 + r * 11) % 41) - 20) * ldexpf(1.0f, (int)(i % 9) - 4);
}

static void test_bf16_sum_exact(void) {
    enum { A = 37, C = 7 };
    const int N = world.size;
    CHECK(ct_comm_init(NULL, NULL) == CT_OK, "a second init: %s", ct_last_error());  // idempotent
    uint16_t in[A], out[A], inplace[A], nb[A], rs_in[4 * C], rs[C], rs_nb[C];
    for (long i = 0; i < A; i++) in[i] = inplace[i] = nb[i] = bf_exact(bf_val(world.rank, i));
    for (long i = 0; i < N * C; i++) rs_in[i] = bf_exact(bf_val(world.rank, 100 + i));
    ct_comm_all_reduce(&world, in, out, A, CT_BF16, CT_COMM_SUM);
    ct_comm_all_reduce(&world, inplace, inplace, A, CT_BF16, CT_COMM_SUM);
    ct_comm_reduce_scatter(&world, rs_in, rs, C, CT_BF16, CT_COMM_SUM);
    // Non-blocking, both in flight with an fp32 all-reduce, waited in another order.
    float f32[3] = {1, 2, 3};
    ct_comm_handle h[3];
    h[0] = ct_comm_all_reduce_start(&world, nb, nb, A, CT_BF16, CT_COMM_SUM);
    h[1] = ct_comm_all_reduce_start(&world, f32, f32, 3, CT_F32, CT_COMM_SUM);
    h[2] = ct_comm_reduce_scatter_start(&world, rs_in, rs_nb, C, CT_BF16, CT_COMM_SUM);
    ct_comm_wait(&h[2]);
    ct_comm_wait(&h[0]);
    ct_comm_wait(&h[1]);
    for (long i = 0; i < A; i++) {
        double ref = 0;
        for (int r = 0; r < N; r++) ref += bf_val(r, i);
        uint16_t want = bf_exact((float)ref);
        CHECK(out[i] == want, "sum[%ld] %#06x (%g) vs %#06x (%g)", i, out[i], bf(out[i]), want, ref);
        CHECK(inplace[i] == want, "in-place sum[%ld] %#06x vs %#06x", i, inplace[i], want);
        CHECK(nb[i] == want, "non-blocking sum[%ld] %#06x vs %#06x", i, nb[i], want);
    }
    for (long i = 0; i < C; i++) {
        double ref = 0;
        for (int r = 0; r < N; r++) ref += bf_val(r, 100 + world.rank * C + i);
        uint16_t want = bf_exact((float)ref);
        CHECK(rs[i] == want, "reduce-scatter[%ld] %#06x vs %#06x", i, rs[i], want);
        CHECK(rs_nb[i] == want, "non-blocking reduce-scatter[%ld] %#06x vs %#06x", i, rs_nb[i], want);
    }
    CHECK(f32[0] == N && f32[1] == 2 * N && f32[2] == 3 * N, "f32 beside bf16");

    // Large buffers (256 KiB a rank, sizes that divide by no group size), like FSDP gradients.
    const long L = 131075, LC = 32771;
    uint16_t *big = malloc(L * sizeof *big), *brs_in = malloc(N * LC * sizeof *brs_in),
             *brs = malloc(LC * sizeof *brs);
    for (long i = 0; i < L; i++) big[i] = bf_exact(bf_val(world.rank, i));
    for (long i = 0; i < N * LC; i++) brs_in[i] = bf_exact(bf_val(world.rank, i));
    h[0] = ct_comm_all_reduce_start(&world, big, big, L, CT_BF16, CT_COMM_SUM);
    ct_comm_wait(&h[0]);
    ct_comm_reduce_scatter(&world, brs_in, brs, LC, CT_BF16, CT_COMM_SUM);
    long bad = 0, bad_rs = 0;
    for (long i = 0; i < L; i++) {
        double ref = 0;
        for (int r = 0; r < N; r++) ref += bf_val(r, i);
        bad += big[i] != bf_exact((float)ref);
    }
    for (long i = 0; i < LC; i++) {
        double ref = 0;
        for (int r = 0; r < N; r++) ref += bf_val(r, world.rank * LC + i);
        bad_rs += brs[i] != bf_exact((float)ref);
    }
    CHECK(bad == 0 && bad_rs == 0, "large: %ld all-reduce and %ld reduce-scatter mismatches", bad,
          bad_rs);
    free(big);
    free(brs_in);
    free(brs);
}

// Distinct bf16 patterns of both signs, plus: a NaN on the last rank at index 0 and on rank 0
// at index 1 (a NaN anywhere makes the max NaN, whichever side of a combine MPI puts it on),
// +inf on rank 0 at index 2 and -inf on every rank at index 3.
static uint16_t bf_max_val(int r, long i, int n) {
    if (i == 0 && r == n - 1) return 0x7fc1;
    if (i == 1 && r == 0) return 0xffc1;
    if (i == 2 && r == 0) return 0x7f80;
    if (i == 3) return 0xff80;
    uint16_t b = (uint16_t)(0x3c00 + (i * 37 + r * 101) % 400);
    return (i + r) % 3 == 0 ? (uint16_t)(b | 0x8000u) : b;
}

static void test_bf16_max(void) {
    enum { A = 23, C = 5 };
    const int N = world.size;
    uint16_t ar[A], rs_in[4 * C], rs[C];
    for (long i = 0; i < A; i++) ar[i] = bf_max_val(world.rank, i, N);
    for (long i = 0; i < N * C; i++) rs_in[i] = bf_max_val(world.rank, 4 + i, N);
    ct_comm_all_reduce(&world, ar, ar, A, CT_BF16, CT_COMM_MAX);
    ct_comm_reduce_scatter(&world, rs_in, rs, C, CT_BF16, CT_COMM_MAX);
    CHECK(bf_isnan(ar[0]), "a NaN on the last rank: max %#06x", ar[0]);
    CHECK(bf_isnan(ar[1]), "a NaN on rank 0: max %#06x", ar[1]);
    CHECK(ar[2] == 0x7f80, "+inf on one rank: max %#06x", ar[2]);
    CHECK(ar[3] == 0xff80, "-inf on every rank: max %#06x", ar[3]);
    for (long i = 4; i < A; i++) {
        uint16_t want = bf_max_val(0, i, N);
        for (int r = 1; r < N; r++)
            if (bf(bf_max_val(r, i, N)) > bf(want)) want = bf_max_val(r, i, N);
        CHECK(ar[i] == want, "max[%ld] %#06x vs %#06x", i, ar[i], want);
    }
    for (long i = 0; i < C; i++) {
        long gi = 4 + (long)world.rank * C + i;
        uint16_t want = bf_max_val(0, gi, N);
        for (int r = 1; r < N; r++)
            if (bf(bf_max_val(r, gi, N)) > bf(want)) want = bf_max_val(r, gi, N);
        CHECK(rs[i] == want, "reduce-scatter max[%ld] %#06x vs %#06x", i, rs[i], want);
    }
}

// Rounding of one combine, a + b, on groups of two (world ranks 0+1, 2+3); a world rank left
// alone (np 1, rank 2 of np 3) checks that a group of one returns its input bit for bit.
// want is worked out by hand (bf16: 1 sign, 8 exponent, 7 mantissa bits; ulp(1) = 2^-7):
static const struct { uint16_t a, b, want; } bf16_pairs[] = {
    {0x3f80, 0x3b80, 0x3f80},  // 1 + 2^-8: halfway between 0x3f80 and 0x3f81 -> even 0x3f80
    {0x3f81, 0x3b80, 0x3f82},  // (1 + 2^-7) + 2^-8 = 1 + 3*2^-8: halfway 0x3f81/0x3f82 -> up
    {0xbf81, 0xbb80, 0xbf82},  // the same negated: to even is away from zero here
    {0x3f81, 0xbb80, 0x3f80},  // (1 + 2^-7) - 2^-8 = 1 + 2^-8: halfway -> down to 0x3f80
    {0x4300, 0x3f00, 0x4300},  // 128 + 0.5 (ulp 1 in [128, 256)): halfway 128/129 -> 128
    {0x4301, 0x3f00, 0x4302},  // 129 + 0.5: halfway 129/130 -> 130
    {0x3fff, 0x3b80, 0x4000},  // (2 - 2^-7) + 2^-8 = 2 - 2^-8: halfway -> 2.0, the carry
                               //   into the exponent
    {0x3f80, 0x3bc0, 0x3f81},  // 1 + 3*2^-9 = 1 + 0.75 ulp: nearest is up
    {0x3f80, 0x3b00, 0x3f80},  // 1 + 2^-9 = 1 + 0.25 ulp: nearest is down
    {0x3f80, 0x4000, 0x4040},  // 1 + 2 = 3, exact
    {0x3f80, 0xbf80, 0x0000},  // 1 - 1 = +0
    {0x8000, 0x8000, 0x8000},  // -0 + -0 = -0
    {0x0001, 0x0001, 0x0002},  // subnormals 2^-133 + 2^-133 = 2^-132, exact (no flush to zero)
    {0x7f7f, 0x7f7f, 0x7f80},  // max finite (2^128 - 2^120) doubled: +inf
    {0x7f7f, 0x7b00, 0x7f80},  // max + 2^119 (half its ulp): halfway to 2^128 -> even = +inf
    {0x7fc0, 0x3f80, 0x7fc0},  // NaN + 1: NaN (checked as any NaN)
    {0x7f80, 0xff80, 0x7fc0},  // inf - inf: NaN
};
enum { NPAIRS = sizeof bf16_pairs / sizeof bf16_pairs[0] };

// The table's want is the bf16 nearest to a + b (exact in double), ties to the even mantissa:
// checked against its two neighbours in bit order, so a slip in the table cannot pass unseen.
static void test_bf16_pairs_table(void) {
    for (int i = 0; i < NPAIRS; i++) {
        uint16_t w = bf16_pairs[i].want;
        double s = (double)bf(bf16_pairs[i].a) + (double)bf(bf16_pairs[i].b);
        if (isnan(s) || isinf(s)) {
            CHECK(isnan(s) ? bf_isnan(w) : w == (s > 0 ? 0x7f80 : 0xff80), "row %d", i);
            continue;
        }
        if (s == (double)bf(w)) continue;  // exact (zeros: the bits in the table give the sign)
        if ((w & 0x7fffu) == 0x7f80u) {   // overflow: s is at least halfway past max finite
            CHECK(fabs(s) >= ldexp(2.0, 127) - ldexp(1.0, 119), "row %d overflows", i);
            continue;
        }
        double d = fabs(s - bf(w)), up = fabs(s - bf((uint16_t)(w + 1))),
               dn = fabs(s - bf((uint16_t)(w - 1)));
        CHECK(d <= up && d <= dn, "row %d: %#06x is not nearest to %.17g", i, w, s);
        if (d == up || d == dn) CHECK((w & 1) == 0, "row %d: a tie must go to even", i);
    }
}

static void test_bf16_rounding_pairs(void) {
    ct_group g;
    CHECK(ct_comm_group_split(&world, world.rank / 2, world.rank, "pair", &g) == CT_OK, "%s",
          ct_last_error());
    uint16_t mine[NPAIRS], ar[NPAIRS], nb[NPAIRS], rs_in[2 * NPAIRS], rs[NPAIRS];
    for (int i = 0; i < NPAIRS; i++)
        mine[i] = nb[i] = rs_in[i] = rs_in[NPAIRS + i] = g.rank == 0 ? bf16_pairs[i].a : bf16_pairs[i].b;
    ct_comm_all_reduce(&g, mine, ar, NPAIRS, CT_BF16, CT_COMM_SUM);
    ct_comm_handle h = ct_comm_all_reduce_start(&g, nb, nb, NPAIRS, CT_BF16, CT_COMM_SUM);
    ct_comm_wait(&h);
    if (g.size == 1) {  // a group of one: no combine happens, every bit stays as it was
        uint16_t odd[3] = {0x7fc5, 0x0001, 0x8000}, odd_out[3], odd_rs[3];
        ct_comm_all_reduce(&g, odd, odd_out, 3, CT_BF16, CT_COMM_SUM);
        ct_comm_reduce_scatter(&g, odd, odd_rs, 3, CT_BF16, CT_COMM_MAX);
        ct_comm_reduce_scatter(&g, rs_in, rs, NPAIRS, CT_BF16, CT_COMM_SUM);
        for (int i = 0; i < 3; i++)
            CHECK(odd_out[i] == odd[i] && odd_rs[i] == odd[i], "alone [%d] %#06x %#06x", i,
                  odd_out[i], odd_rs[i]);
        for (int i = 0; i < NPAIRS; i++)
            CHECK(ar[i] == mine[i] && nb[i] == mine[i] && rs[i] == mine[i], "alone row %d", i);
    } else {
        CHECK(g.size == 2, "size %d", g.size);
        ct_comm_reduce_scatter(&g, rs_in, rs, NPAIRS / 2, CT_BF16, CT_COMM_SUM);
        for (int i = 0; i < NPAIRS; i++) {
            uint16_t w = bf16_pairs[i].want;
            bool ok = bf_isnan(w) ? bf_isnan(ar[i]) && bf_isnan(nb[i]) : ar[i] == w && nb[i] == w;
            CHECK(ok, "row %d: %#06x + %#06x = %#06x (non-blocking %#06x), want %#06x", i,
                  bf16_pairs[i].a, bf16_pairs[i].b, ar[i], nb[i], w);
        }
        // Chunk g.rank of (2, NPAIRS / 2): rows g.rank * (NPAIRS / 2) onwards.
        for (int i = 0; i < NPAIRS / 2; i++) {
            int row = g.rank * (NPAIRS / 2) + i;
            uint16_t w = bf16_pairs[row].want;
            CHECK(bf_isnan(w) ? bf_isnan(rs[i]) : rs[i] == w, "reduce-scatter row %d: %#06x vs %#06x",
                  row, rs[i], w);
        }
    }
    ct_comm_group_free(&g);
}

// A bf16 reduction counts 2 bytes an element: half the bytes of the same fp32 one.
static void test_bf16_stats(void) {
    ct_group g;
    CHECK(ct_comm_group_split(&world, 0, world.rank, "bf16stats", &g) == CT_OK, "%s", ct_last_error());
    const double N = g.size;
    float f32_in[4 * 17], f32_out[17];
    uint16_t b_in[4 * 17], b_out[41];
    memset(f32_in, 0, sizeof f32_in);
    memset(b_in, 0, sizeof b_in);
    ct_comm_reduce_scatter(&g, f32_in, f32_out, 17, CT_F32, CT_COMM_SUM);
    double f32_bytes = g.stats[CT_COMM_REDUCE_SCATTER].bytes;
    ct_comm_stats_reset(&g);
    ct_comm_reduce_scatter(&g, b_in, b_out, 17, CT_BF16, CT_COMM_SUM);
    double bf16_bytes = g.stats[CT_COMM_REDUCE_SCATTER].bytes;
    CHECK(g.stats[CT_COMM_REDUCE_SCATTER].calls == 1, "calls");
    CHECK(bf16_bytes * 2 == f32_bytes, "bf16 %g vs f32 %g", bf16_bytes, f32_bytes);
    CHECK_CLOSE(bf16_bytes, (N - 1) * 17 * 2, 1e-12, 0);
    ct_comm_all_reduce(&g, b_in, b_out, 41, CT_BF16, CT_COMM_MAX);
    CHECK_CLOSE(g.stats[CT_COMM_ALL_REDUCE].bytes, 2 * (N - 1) / N * 41 * 2, 1e-12, 0);
    ct_comm_group_free(&g);
}

static void test_dtype_sizes_and_names(void) {
    CHECK(ct_dtype_size(CT_F32) == sizeof(float), "f32");
    CHECK(ct_dtype_size(CT_BF16) == 2, "bf16");
    CHECK(ct_dtype_size(CT_I32) == sizeof(int32_t), "i32");
    CHECK(ct_dtype_size(CT_F64) == sizeof(double), "f64");
    CHECK(ct_dtype_size(CT_I64) == sizeof(int64_t), "i64");
    CHECK(ct_dtype_size(CT_U8) == 1, "u8");
    CHECK(strcmp(ct_comm_kind_name(CT_COMM_REDUCE_SCATTER), "reduce_scatter") == 0, "name");
}

// ---- backend table (run by the parent, before and without MPI) ------------------------------

static void test_backend_table(void) {
    const ct_comm_backend *mpi = ct_comm_backend_get("mpi");
    CHECK(mpi == &ct_comm_backend_mpi && strcmp(mpi->name, "mpi") == 0, "mpi backend");
    CHECK(ct_comm_backend_get("nccl") == NULL && ct_comm_backend_get("") == NULL &&
              ct_comm_backend_get(NULL) == NULL, "unknown names");
    CHECK(strcmp(ct_comm_backend_name(), "mpi") == 0, "default %s", ct_comm_backend_name());
    CHECK(ct_comm_select("nccl") == CT_ERR &&
              strcmp(ct_last_error(), "comm: this build has no backend named 'nccl' (it has: mpi)") == 0,
          "%s", ct_last_error());
    CHECK(ct_comm_select("mpi") == CT_OK && strcmp(ct_comm_backend_name(), "mpi") == 0, "select mpi");
    // Every member is filled: comm.c calls them without checking.
    CHECK(mpi->init && mpi->finalize && mpi->abort_hook && mpi->group_world && mpi->group_split &&
              mpi->group_free && mpi->all_reduce && mpi->all_gather && mpi->reduce_scatter &&
              mpi->broadcast && mpi->send && mpi->recv && mpi->barrier && mpi->all_to_all_v && mpi->test,
          "a member is NULL");
    ct_group g;
    memset(&g, 0, sizeof g);
    CHECK(ct_comm_group_world(&g, 1) == CT_ERR &&
              strcmp(ct_last_error(), "comm: ct_comm_init must run before ct_comm_group_world") == 0,
          "%s", ct_last_error());
    ct_comm_group_free(&g);  // freeing a group never made is a no-op
}

// A collective on a zeroed (never made) group ends the process with a comm line, not a crash.
static void test_unmade_group_is_fatal(void) {
    int fd[2];
    CHECK(pipe(fd) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        ct_group g;
        memset(&g, 0, sizeof g);
        float v[2] = {0};
        ct_comm_all_reduce(&g, v, v, 2, CT_F32, CT_COMM_SUM);
        _exit(0);
    }
    close(fd[1]);
    char err[256] = {0};
    ssize_t n = read(fd[0], err, sizeof err - 1);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(n > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
    CHECK(strstr(err, "comm: all_reduce on group ?: the group was never made (or was freed)"), "%s", err);
}

// ---- failure drills (tests/test_comm.sh checks what they print and how fast the job ends) ----

static double arg_timeout = 2;

static int scenario(const char *name) {
    float v[8] = {0};
    if (strcmp(name, "timeout") == 0) {
        // Rank 1 never joins; the others' all-reduce must time out and end the job.
        if (world.rank == 1) sleep(120);
        ct_comm_all_reduce(&world, v, v, 8, CT_F32, CT_COMM_SUM);
    } else if (strcmp(name, "fatal") == 0) {
        // Rank 1 fails while the others sit in an all-reduce (with the default 300 s timeout).
        if (world.rank == 1) {
            usleep(300 * 1000);
            ct_fatal("test", "deliberate failure in the middle of a step");
        }
        ct_comm_all_reduce(&world, v, v, 8, CT_F32, CT_COMM_SUM);
    } else if (strcmp(name, "kill") == 0) {
        // Rank 1 dies without a word (SIGKILL) while the others sit in an all-reduce.
        if (world.rank == 1) {
            usleep(300 * 1000);
            raise(SIGKILL);
        }
        ct_comm_all_reduce(&world, v, v, 8, CT_F32, CT_COMM_SUM);
    } else if (strcmp(name, "mpierror") == 0) {
        // A negative tag: MPI itself refuses it; the error must come back as a ct_fatal line.
        if (world.rank == 0) ct_comm_send(&world, v, 8, CT_F32, 1, -5);
        ct_comm_barrier(&world);
    } else if (strcmp(name, "badpeer") == 0) {
        if (world.rank == 0) ct_comm_send(&world, v, 8, CT_F32, world.size + 3, 0);
        ct_comm_barrier(&world);
    } else if (strcmp(name, "rsoverlap") == 0) {
        ct_comm_reduce_scatter(&world, v, v + 1, 2, CT_F32, CT_COMM_SUM);
    } else if (strcmp(name, "u8reduce") == 0) {
        uint8_t b[4] = {0};
        ct_comm_all_reduce(&world, b, b, 4, CT_U8, CT_COMM_SUM);
    } else {
        fprintf(stderr, "unknown scenario %s\n", name);
        return 2;
    }
    printf("scenario %s: rank %d finished without failing\n", name, world.rank);
    return 0;
}

int main(int argc, char **argv) {
    const char *scen = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--scenario") == 0 && i + 1 < argc) scen = argv[++i];
        if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) arg_timeout = atof(argv[++i]);
    }
    if (!scen && !ct_mpi_test_is_child(argc, argv)) {
        // Parent: the cases that need no MPI, then every MPI case at 1, 2, 3 and 4 ranks.
        CT_RUN(test_backend_table);
        CT_RUN(test_unmade_group_is_fatal);
        CT_RUN(test_bf16_pairs_table);
        int bad = ct_test_failures != 0;
        for (int np = 1; np <= 4; np++) {
            int rc = ct_mpi_test_spawn(argv[0], np, 240, NULL);
            if (rc != 0) {
                printf("FAIL mpirun_np%d: exit %d\n", np, rc);
                bad = 1;
            }
        }
        return bad;
    }
    if (ct_comm_init(&argc, &argv) != CT_OK) {
        printf("FAIL init: %s\n", ct_last_error());
        return 1;
    }
    if (ct_comm_group_world(&world, scen ? arg_timeout : 30) != CT_OK) {
        printf("FAIL world: %s\n", ct_last_error());
        return 1;
    }
    if (scen) {
        if (strcmp(scen, "fatal") == 0 || strcmp(scen, "kill") == 0) world.timeout_s = 300;
        int rc = scenario(scen);
        ct_comm_finalize();
        return rc;
    }
    CT_MPI_RUN(test_dtype_sizes_and_names);
    CT_MPI_RUN(test_all_reduce_sum_f32);
    CT_MPI_RUN(test_all_reduce_max_and_other_dtypes);
    CT_MPI_RUN(test_all_gather);
    CT_MPI_RUN(test_reduce_scatter);
    CT_MPI_RUN(test_broadcast);
    CT_MPI_RUN(test_send_recv_ring);
    CT_MPI_RUN(test_nonblocking);
    CT_MPI_RUN(test_split_groups);
    CT_MPI_RUN(test_stats);
    CT_MPI_RUN(test_all_to_all_v);
    CT_MPI_RUN(test_bf16_sum_exact);
    CT_MPI_RUN(test_bf16_max);
    CT_MPI_RUN(test_bf16_rounding_pairs);
    CT_MPI_RUN(test_bf16_stats);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}

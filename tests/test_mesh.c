// Tests of comm/mesh.h.
//
// Started plainly (as tests/run_tests.sh does) this program runs the pure cases -- layout
// resolution with every refusal and its exact one-line message, coordinates, group positions --
// then re-runs itself under `mpirun -np 8 ... --child` (tests/mpi_test.h) for the communicator
// cases: for two 8-rank layouts, every rank's coordinates and the members of every group are
// checked against the formula rank = ((((pp·R + r)·S + s)·CP + c)·TP + t), written out here.
#include <string.h>

#include "comm/mesh.h"
#include "mpi_test.h"

static ct_mesh_layout L(int pp, int rep, int shard, int cp, int tp) {
    ct_mesh_layout l = {{pp, rep, shard, cp, tp}};
    return l;
}

// The mesh formula, spelled out.
static int formula_rank(const ct_mesh_layout *l, int p, int r, int s, int c, int t) {
    const int R = l->degree[1], S = l->degree[2], CP = l->degree[3], TP = l->degree[4];
    return (((p * R + r) * S + s) * CP + c) * TP + t;
}

// ---- pure ---------------------------------------------------------------------------------

static void check_resolves(ct_mesh_layout want, int world, ct_mesh_layout expect) {
    ct_mesh_layout out;
    char err[CT_MESH_ERR_LEN] = "x";
    ct_status st = ct_mesh_resolve(&want, world, &out, err, sizeof err);
    CHECK(st == CT_OK, "world %d refused: %s", world, err);
    CHECK(err[0] == '\0', "error text left on success: %s", err);
    if (st == CT_OK)
        for (int d = 0; d < CT_MESH_NDIMS; d++)
            CHECK(out.degree[d] == expect.degree[d], "world %d dim %d: %d vs %d", world, d,
                  out.degree[d], expect.degree[d]);
}

static void test_resolve_accepts(void) {
    check_resolves(L(1, 1, 1, 1, 1), 1, L(1, 1, 1, 1, 1));
    check_resolves(L(1, 1, -1, 1, 1), 1, L(1, 1, 1, 1, 1));
    check_resolves(L(1, 1, -1, 1, 1), 7, L(1, 1, 7, 1, 1));
    check_resolves(L(2, 1, -1, 1, 2), 8, L(2, 1, 2, 1, 2));
    check_resolves(L(2, 1, 2, 1, 2), 8, L(2, 1, 2, 1, 2));
    check_resolves(L(1, 2, -1, 2, 1), 16, L(1, 2, 4, 2, 1));
    check_resolves(L(2, 2, 2, 2, 2), 32, L(2, 2, 2, 2, 2));
    check_resolves(L(3, 1, -1, 1, 1), 3, L(3, 1, 1, 1, 1));  // -1 may resolve to 1
    check_resolves(L(1, 1, 1, 1, 8), 8, L(1, 1, 1, 1, 8));
    check_resolves(L(4, 2, -1, 1, 8), 512, L(4, 2, 8, 1, 8));
}

static void check_refuses(ct_mesh_layout want, int world, const char *msg) {
    ct_mesh_layout out = L(9, 9, 9, 9, 9);
    char err[CT_MESH_ERR_LEN];
    ct_set_error("none");
    ct_status st = ct_mesh_resolve(&want, world, &out, err, sizeof err);
    CHECK(st == CT_ERR, "accepted, expected: %s", msg);
    CHECK(strcmp(err, msg) == 0, "message\n    got  [%s]\n    want [%s]", err, msg);
    CHECK(strcmp(ct_last_error(), msg) == 0, "last error [%s]", ct_last_error());
    CHECK(strchr(err, '\n') == NULL, "more than one line");
    CHECK(out.degree[0] == 9 && out.degree[4] == 9, "output written on refusal");
}

static void test_resolve_refuses_product_mismatch(void) {
    check_refuses(L(2, 1, 3, 1, 2), 8,
                  "layout pp 2 × dp_replicate 1 × dp_shard 3 × cp 1 × tp 2 = 12 ranks, but the world has 8");
    check_refuses(L(1, 1, 2, 1, 2), 8,
                  "layout pp 1 × dp_replicate 1 × dp_shard 2 × cp 1 × tp 2 = 4 ranks, but the world has 8");
    check_refuses(L(1, 1, 1, 1, 1), 2,
                  "layout pp 1 × dp_replicate 1 × dp_shard 1 × cp 1 × tp 1 = 1 ranks, but the world has 2");
    // Products far beyond int are reported, not overflowed.
    check_refuses(L(65536, 65536, 65536, 1, 1), 8,
                  "layout pp 65536 × dp_replicate 65536 × dp_shard 65536 × cp 1 × tp 1 = "
                  "281474976710656 ranks, but the world has 8");
}

static void test_resolve_refuses_shard_not_dividing(void) {
    check_refuses(L(2, 1, -1, 1, 3), 8,
                  "layout pp 2 × dp_replicate 1 × dp_shard -1 × cp 1 × tp 3: the other degrees "
                  "make 6 ranks, which does not divide the world of 8");
    check_refuses(L(4, 1, -1, 1, 4), 8,
                  "layout pp 4 × dp_replicate 1 × dp_shard -1 × cp 1 × tp 4: the other degrees "
                  "make 16 ranks, which does not divide the world of 8");
    check_refuses(L(1, 2, -1, 2, 1), 6,
                  "layout pp 1 × dp_replicate 2 × dp_shard -1 × cp 2 × tp 1: the other degrees "
                  "make 4 ranks, which does not divide the world of 6");
}

static void test_resolve_refuses_bad_degrees(void) {
    check_refuses(L(0, 1, 1, 1, 1), 1, "layout: pp degree must be >= 1, got 0");
    check_refuses(L(1, 0, 1, 1, 1), 1, "layout: dp_replicate degree must be >= 1, got 0");
    check_refuses(L(1, 1, 0, 1, 1), 1,
                  "layout: dp_shard degree must be >= 1 (or -1: whatever ranks are left), got 0");
    check_refuses(L(1, 1, -2, 1, 1), 2,
                  "layout: dp_shard degree must be >= 1 (or -1: whatever ranks are left), got -2");
    check_refuses(L(1, 1, 1, 0, 1), 1, "layout: cp degree must be >= 1, got 0");
    check_refuses(L(1, 1, 1, 1, -1), 1, "layout: tp degree must be >= 1, got -1");
    check_refuses(L(-1, 1, -1, 1, 1), 4, "layout: pp degree must be >= 1, got -1");
    check_refuses(L(1, 1, -1, 1, 1), 0, "layout: world size must be >= 1, got 0");
}

static void test_layout_from_config_and_format(void) {
    ct_config c;
    memset(&c, 0, sizeof c);
    c.pipeline_degree = 2;
    c.data_replicate_degree = 3;
    c.data_shard_degree = -1;
    c.context_extension_degree = 5;
    c.compute_parallel_degree = 7;
    ct_mesh_layout l = ct_mesh_layout_from_config(&c);
    char buf[128];
    int len = ct_mesh_layout_format(&l, buf, sizeof buf);
    const char *want = "pp 2 × dp_replicate 3 × dp_shard -1 × cp 5 × tp 7";
    CHECK(strcmp(buf, want) == 0, "[%s]", buf);
    CHECK(len == (int)strlen(want), "len %d", len);
    char small[6];
    CHECK(ct_mesh_layout_format(&l, small, sizeof small) == len && strcmp(small, "pp 2 ") == 0,
          "truncated [%s]", small);
}

// Every rank of several layouts: coordinates and rank agree with the formula both ways.
static void test_coords_match_formula(void) {
    ct_mesh_layout ls[] = {L(2, 1, 2, 1, 2), L(2, 3, 2, 2, 3), L(1, 1, 5, 1, 1), L(3, 2, 1, 2, 2)};
    for (size_t li = 0; li < sizeof ls / sizeof ls[0]; li++) {
        const ct_mesh_layout *l = &ls[li];
        int seen = 0;
        for (int p = 0; p < l->degree[0]; p++)
            for (int r = 0; r < l->degree[1]; r++)
                for (int s = 0; s < l->degree[2]; s++)
                    for (int c = 0; c < l->degree[3]; c++)
                        for (int t = 0; t < l->degree[4]; t++) {
                            int rank = formula_rank(l, p, r, s, c, t), co[CT_MESH_NDIMS];
                            CHECK(rank == seen, "ranks not dense/ordered: %d vs %d", rank, seen);
                            seen++;
                            ct_mesh_coords(l, rank, co);
                            CHECK(co[0] == p && co[1] == r && co[2] == s && co[3] == c && co[4] == t,
                                  "layout %zu rank %d", li, rank);
                            int want[CT_MESH_NDIMS] = {p, r, s, c, t};
                            CHECK(ct_mesh_rank(l, want) == rank, "layout %zu rank %d", li, rank);
                        }
    }
}

// For every subset of dimensions: two ranks share a group iff their coordinates agree outside
// the subset; keys inside a group are 0..size-1 and follow world rank order.
static void test_group_positions(void) {
    const ct_mesh_layout l = L(2, 1, 3, 2, 2);  // 24 ranks
    const int W = 24;
    for (unsigned mask = 0; mask < (1u << CT_MESH_NDIMS); mask++) {
        int size = 1;
        for (int d = 0; d < CT_MESH_NDIMS; d++)
            if (mask & (1u << d)) size *= l.degree[d];
        CHECK(ct_mesh_mask_size(&l, mask) == size, "mask %u size", mask);
        int color[24], key[24], co[24][CT_MESH_NDIMS];
        for (int w = 0; w < W; w++) {
            ct_mesh_group_position(&l, w, mask, &color[w], &key[w]);
            ct_mesh_coords(&l, w, co[w]);
        }
        for (int a = 0; a < W; a++) {
            CHECK(color[a] >= 0 && color[a] < W / size && key[a] >= 0 && key[a] < size,
                  "mask %u rank %d color %d key %d", mask, a, color[a], key[a]);
            for (int b = a + 1; b < W; b++) {
                int same = 1;
                for (int d = 0; d < CT_MESH_NDIMS; d++)
                    if (!(mask & (1u << d)) && co[a][d] != co[b][d]) same = 0;
                CHECK((color[a] == color[b]) == same, "mask %u ranks %d %d", mask, a, b);
                if (same) CHECK(key[a] < key[b], "mask %u: key order %d %d", mask, a, b);
            }
        }
    }
}

// ---- under mpirun, 8 ranks ----------------------------------------------------------------

static ct_group world;

// Expected members of the group spanning `mask` that contains world rank `me`, ascending.
static int expected_members(const ct_mesh_layout *l, int me, unsigned mask, int *out) {
    int mine[CT_MESH_NDIMS] = {0}, n = 0;
    for (int p = 0; p < l->degree[0]; p++)
        for (int r = 0; r < l->degree[1]; r++)
            for (int s = 0; s < l->degree[2]; s++)
                for (int c = 0; c < l->degree[3]; c++)
                    for (int t = 0; t < l->degree[4]; t++)
                        if (formula_rank(l, p, r, s, c, t) == me) {
                            int v[] = {p, r, s, c, t};
                            memcpy(mine, v, sizeof v);
                        }
    for (int p = 0; p < l->degree[0]; p++)
        for (int r = 0; r < l->degree[1]; r++)
            for (int s = 0; s < l->degree[2]; s++)
                for (int c = 0; c < l->degree[3]; c++)
                    for (int t = 0; t < l->degree[4]; t++) {
                        int v[] = {p, r, s, c, t}, ok = 1;
                        for (int d = 0; d < CT_MESH_NDIMS; d++)
                            if (!(mask & (1u << d)) && v[d] != mine[d]) ok = 0;
                        if (ok) out[n++] = formula_rank(l, p, r, s, c, t);
                    }
    return n;
}

static void check_group(const ct_mesh *m, ct_group *g, unsigned mask, const char *name) {
    int want[64], got[64];
    int n = expected_members(&m->layout, world.rank, mask, want);
    CHECK(strcmp(g->name, name) == 0, "name %s vs %s", g->name, name);
    CHECK(g->size == n, "group %s size %d vs %d", name, g->size, n);
    if (g->size != n) return;
    int idx = -1;
    for (int i = 0; i < n; i++)
        if (want[i] == world.rank) idx = i;
    CHECK(g->rank == idx, "group %s: rank %d, expected %d", name, g->rank, idx);
    int32_t me = world.rank, all[64];
    ct_comm_all_gather(g, &me, all, 1, CT_I32);
    for (int i = 0; i < n; i++) got[i] = all[i];
    for (int i = 0; i < n; i++)
        CHECK(got[i] == want[i], "group %s member %d: world rank %d, expected %d", name, i, got[i],
              want[i]);
    // And the group computes over exactly those ranks.
    int64_t sum = world.rank, ref = 0;
    ct_comm_all_reduce(g, &sum, &sum, 1, CT_I64, CT_COMM_SUM);
    for (int i = 0; i < n; i++) ref += want[i];
    CHECK(sum == ref, "group %s sum %lld vs %lld", name, (long long)sum, (long long)ref);
}

static void check_mesh(ct_mesh_layout want, ct_mesh_layout resolved) {
    ct_mesh m;
    CHECK(ct_mesh_create(&world, &want, &m) == CT_OK, "%s", ct_last_error());
    for (int d = 0; d < CT_MESH_NDIMS; d++)
        CHECK(m.layout.degree[d] == resolved.degree[d], "degree %d", d);
    CHECK(m.world_rank == world.rank && m.world_size == 8, "world");
    const ct_mesh_layout *l = &m.layout;
    int p = m.coord[0], r = m.coord[1], s = m.coord[2], c = m.coord[3], t = m.coord[4];
    CHECK(formula_rank(l, p, r, s, c, t) == world.rank, "coords (%d,%d,%d,%d,%d) of rank %d", p,
          r, s, c, t, world.rank);
    for (int d = 0; d < CT_MESH_NDIMS; d++) CHECK(m.coord[d] < l->degree[d], "coord %d", d);
    const char *names[] = {"pp", "dp_replicate", "dp_shard", "cp", "tp"};
    for (int d = 0; d < CT_MESH_NDIMS; d++) {
        check_group(&m, &m.dim[d], 1u << d, names[d]);
        CHECK(m.dim[d].rank == m.coord[d], "dim %s rank %d vs coord %d", names[d], m.dim[d].rank,
              m.coord[d]);
    }
    check_group(&m, &m.fsdp, (1u << CT_MESH_DP_SHARD) | (1u << CT_MESH_CP), "fsdp");
    check_group(&m, &m.dp, (1u << CT_MESH_DP_REPLICATE) | (1u << CT_MESH_DP_SHARD), "dp");
    check_group(&m, &m.dp_cp,
                (1u << CT_MESH_DP_REPLICATE) | (1u << CT_MESH_DP_SHARD) | (1u << CT_MESH_CP), "dp_cp");
    CHECK(m.fsdp.timeout_s == world.timeout_s, "timeout inherited");
    ct_mesh_free(&m);
}

static void test_mesh_pp2_dp2_tp2(void) { check_mesh(L(2, 1, 2, 1, 2), L(2, 1, 2, 1, 2)); }
static void test_mesh_rep2_shard_auto_cp2(void) { check_mesh(L(1, 2, -1, 2, 1), L(1, 2, 2, 2, 1)); }

// A wrong layout is refused on every rank before any communicator exists; nobody hangs.
static void test_mesh_refuses_before_work(void) {
    ct_mesh m;
    ct_mesh_layout bad = L(2, 1, 3, 1, 2);
    CHECK(ct_mesh_create(&world, &bad, &m) == CT_ERR, "accepted");
    CHECK(strcmp(ct_last_error(),
                 "layout pp 2 × dp_replicate 1 × dp_shard 3 × cp 1 × tp 2 = 12 ranks, but the world has 8") == 0,
          "[%s]", ct_last_error());
    CHECK(m.dim[0].size == 0 && m.fsdp.size == 0, "groups made");
    ct_mesh_free(&m);  // harmless on a refused mesh
    ct_comm_barrier(&world);
}

int main(int argc, char **argv) {
    if (!ct_mpi_test_is_child(argc, argv)) {
        CT_RUN(test_resolve_accepts);
        CT_RUN(test_resolve_refuses_product_mismatch);
        CT_RUN(test_resolve_refuses_shard_not_dividing);
        CT_RUN(test_resolve_refuses_bad_degrees);
        CT_RUN(test_layout_from_config_and_format);
        CT_RUN(test_coords_match_formula);
        CT_RUN(test_group_positions);
        if (ct_mpi_test_spawn(argv[0], 8, 240, NULL) != 0) {
            printf("FAIL mesh_mpirun_np8: the 8-rank run failed\n");
            ct_test_failures++;
        }
        CT_TEST_EXIT();
    }
    if (ct_comm_init(&argc, &argv) != CT_OK || ct_comm_group_world(&world, 30) != CT_OK) {
        printf("FAIL mesh_init: %s\n", ct_last_error());
        return 1;
    }
    if (world.size != 8) {
        if (world.rank == 0) printf("FAIL mesh_mpi: needs 8 ranks, got %d\n", world.size);
        ct_comm_finalize();
        return 1;
    }
    CT_MPI_RUN(test_mesh_pp2_dp2_tp2);
    CT_MPI_RUN(test_mesh_rep2_shard_auto_cp2);
    CT_MPI_RUN(test_mesh_refuses_before_work);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}

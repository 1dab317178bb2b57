// The shard descriptor against a brute-force reference: every local element's global index
// computed the slow way (local row/col -> global row/col), over many shapes, tp splits and flat
// ranges; the union over all (tp rank, fsdp rank) covers each global element exactly once.
#include <stdlib.h>
#include <string.h>

#include "comm/mesh.h"
#include "core/shard_desc.h"
#include "test.h"

// core mirrors comm's mesh order so comm can adopt the core enum without renumbering.
_Static_assert(CT_DIM_PP == (int)CT_MESH_PP && CT_DIM_DP_REPLICATE == (int)CT_MESH_DP_REPLICATE &&
                   CT_DIM_DP_SHARD == (int)CT_MESH_DP_SHARD && CT_DIM_CP == (int)CT_MESH_CP &&
                   CT_DIM_TP == (int)CT_MESH_TP && CT_DIM_COUNT == (int)CT_MESH_NDIMS,
               "core ct_dim must match comm ct_mesh_dim");

static const long ROWS[] = {1, 2, 3, 4, 6, 12};
static const long COLS[] = {1, 2, 3, 4, 6, 12};
enum { NSHAPES = 6 };

// Global index of tp-local flat element e, the slow way (same math as ct_param_global_index).
static long ref_global(long rows, long cols, int tp_dim, long tp_start, long tp_count, long e) {
    long lc = tp_dim == 1 ? tp_count : cols;
    long grow = e / lc + (tp_dim == 0 ? tp_start : 0);
    long gcol = e % lc + (tp_dim == 1 ? tp_start : 0);
    (void)rows;
    return grow * cols + gcol;
}

static long ref_of(const ct_shard_desc *d, long local) {
    return ref_global(d->global_shape[0], d->global_shape[1], d->tp_dim, d->tp_start, d->tp_count,
                      d->flat_begin + local);
}

// Walks d's runs and checks them against the reference; adds 1 to hits[global] for each element
// when hits is not NULL. Returns false (after one CHECK message) on the first mismatch.
static bool check_runs(const ct_shard_desc *d, int *hits) {
    ct_shard_iter it = CT_SHARD_ITER_INIT;
    ct_shard_run r, prev = {0, 0, 0};
    long next_local = 0;
    int n_runs = 0;
    while (ct_shard_next_run(d, &it, &r)) {
        CHECK(r.len > 0 && r.local == next_local, "run %d: local %ld len %ld, expected local %ld", n_runs, r.local,
              r.len, next_local);
        if (ct_test_case_failed) return false;
        for (long i = 0; i < r.len; i++) {
            long want = ref_of(d, r.local + i);
            CHECK(r.global + i == want && ct_shard_desc_global_index(d, r.local + i) == want,
                  "local %ld -> %ld (point %ld), reference %ld (tp_dim %d start %ld count %ld flat %ld+%ld)",
                  r.local + i, r.global + i, ct_shard_desc_global_index(d, r.local + i), want, d->tp_dim, d->tp_start,
                  d->tp_count, d->flat_begin, d->flat_count);
            if (ct_test_case_failed) return false;
            if (hits) hits[want]++;
        }
        // Maximal: the previous run could not have been extended into this one.
        CHECK(n_runs == 0 || prev.global + prev.len != r.global, "runs at local %ld and %ld could merge", prev.local,
              r.local);
        if (ct_test_case_failed) return false;
        prev = r;
        next_local += r.len;
        n_runs++;
    }
    CHECK(next_local == d->flat_count, "runs cover %ld of %ld elements", next_local, d->flat_count);
    CHECK(!ct_shard_next_run(d, &it, &r), "iterator restarted after the end");
    return !ct_test_case_failed;
}

// Every flat sub-range [b, b + n) of every tp slice of every small shape.
static void test_runs_match_reference_all_subranges(void) {
    for (int ri = 0; ri < NSHAPES; ri++)
        for (int ci = 0; ci < NSHAPES; ci++)
            for (int dim = -1; dim <= 1; dim++)
                for (int tp = 1; tp <= 4; tp++)
                    for (int rank = 0; rank < tp; rank++) {
                        ct_shard_desc base;
                        long split = dim == 0 ? ROWS[ri] : COLS[ci];
                        if (dim >= 0 && split % tp) continue;
                        CHECK(ct_shard_desc_tp(&base, ROWS[ri], COLS[ci], dim, rank, tp) == CT_OK, "%s",
                              ct_last_error());
                        long n = ct_shard_desc_slice_numel(&base);
                        CHECK(base.flat_begin == 0 && base.flat_count == n && ct_shard_desc_valid(&base),
                              "fresh desc holds the whole slice");
                        for (long b = 0; b <= n; b++)
                            for (long c = 0; b + c <= n; c++) {
                                ct_shard_desc d = base;
                                d.flat_begin = b;
                                d.flat_count = c;
                                if (!check_runs(&d, NULL)) return;
                            }
                    }
}

// FSDP: each tp-local tensor sits inside a group buffer between other tensors and the group is
// cut into equal shards (the last padded), so ranges start and end mid-row. Over all (tp, fsdp)
// ranks, the owners of each copy cover every global element exactly once.
static void test_union_covers_each_element_once(void) {
    static const long PRE[] = {0, 5}, POST[] = {0, 3};
    for (int ri = 0; ri < NSHAPES; ri++)
        for (int ci = 0; ci < NSHAPES; ci++)
            for (int dim = -1; dim <= 1; dim++)
                for (int tp = 1; tp <= 4; tp++) {
                    long rows = ROWS[ri], cols = COLS[ci];
                    if (dim >= 0 && (dim == 0 ? rows : cols) % tp) continue;
                    for (int fs = 1; fs <= 5; fs++)
                        for (int pi = 0; pi < 2; pi++)
                            for (int qi = 0; qi < 2; qi++) {
                                int *hits = calloc((size_t)(rows * cols), sizeof(int));
                                for (int t = 0; t < tp; t++) {
                                    long held = 0;
                                    for (int s = 0; s < fs; s++) {
                                        ct_shard_desc d;
                                        CHECK(ct_shard_desc_tp(&d, rows, cols, dim, t, tp) == CT_OK, "%s",
                                              ct_last_error());
                                        long n = ct_shard_desc_slice_numel(&d);
                                        long group = PRE[pi] + n + POST[qi];
                                        long shard = (group + fs - 1) / fs;  // as FSDP: padded equal shards
                                        long lo = s * shard, hi = lo + shard, pos = -1;
                                        long got = ct_shard_desc_intersect(&d, PRE[pi], lo, hi, &pos);
                                        CHECK(got == d.flat_count && ct_shard_desc_valid(&d), "intersect result");
                                        if (got)
                                            CHECK(lo + pos == PRE[pi] + d.flat_begin && pos >= 0 && pos + got <= shard,
                                                  "shard position %ld of [%ld,%ld) for flat_begin %ld", pos, lo, hi,
                                                  d.flat_begin);
                                        else
                                            CHECK(pos == 0 && d.flat_begin == 0, "empty intersection");
                                        int coord[CT_DIM_COUNT] = {0, 0, s, 0, t};
                                        if (!check_runs(&d, ct_shard_desc_owns_copy(&d, coord) ? hits : NULL)) {
                                            free(hits);
                                            return;
                                        }
                                        held += got;
                                    }
                                    CHECK(held == rows * cols / (dim >= 0 ? tp : 1),
                                          "fsdp shards of tp rank %d hold %ld elements", t, held);
                                }
                                for (long g = 0; g < rows * cols; g++)
                                    CHECK(hits[g] == 1, "%ldx%ld tp_dim %d tp %d fsdp %d: element %ld counted %d times",
                                          rows, cols, dim, tp, fs, g, hits[g]);
                                free(hits);
                                if (ct_test_case_failed) return;
                            }
                }
}

static void test_run_shapes(void) {
    ct_shard_desc d;
    ct_shard_iter it = CT_SHARD_ITER_INIT;
    ct_shard_run r;
    // Whole tensor and row slice: one run each.
    d = ct_shard_desc_make(8192, 4096, -1, 0, 0);
    CHECK(ct_shard_next_run(&d, &it, &r) && r.local == 0 && r.global == 0 && r.len == 8192L * 4096, "whole");
    CHECK(!ct_shard_next_run(&d, &it, &r), "whole is one run");
    CHECK(ct_shard_desc_tp(&d, 8192, 4096, 0, 3, 4) == CT_OK, "row split");
    it = CT_SHARD_ITER_INIT;
    CHECK(ct_shard_next_run(&d, &it, &r) && r.global == 3L * 2048 * 4096 && r.len == 2048L * 4096, "row slice");
    CHECK(!ct_shard_next_run(&d, &it, &r), "row slice is one run");
    // Column slice: one run per row, each tp_count long, stepping by the global row.
    CHECK(ct_shard_desc_tp(&d, 8192, 4096, 1, 2, 4) == CT_OK, "column split");
    it = CT_SHARD_ITER_INIT;
    long runs = 0;
    while (ct_shard_next_run(&d, &it, &r)) {
        if (r.len != 1024 || r.global != runs * 4096 + 2048 || r.local != runs * 1024) break;
        runs++;
    }
    CHECK(runs == 8192, "column slice gave %ld good runs, expected 8192", runs);
    // A column "split" over one rank is the whole tensor: one run.
    CHECK(ct_shard_desc_tp(&d, 6, 5, 1, 0, 1) == CT_OK, "tp 1");
    it = CT_SHARD_ITER_INIT;
    CHECK(ct_shard_next_run(&d, &it, &r) && r.len == 30 && !ct_shard_next_run(&d, &it, &r), "full-width slice");
}

static void test_empty(void) {
    ct_shard_desc d;
    ct_shard_iter it = CT_SHARD_ITER_INIT;
    ct_shard_run r;
    CHECK(ct_shard_desc_tp(&d, 4, 6, 1, 1, 2) == CT_OK, "split");
    long pos = -1;
    CHECK(ct_shard_desc_intersect(&d, 10, 0, 10, &pos) == 0 && pos == 0, "range before the tensor");
    CHECK(d.flat_count == 0 && ct_shard_desc_numel_local(&d) == 0 && !ct_shard_next_run(&d, &it, &r), "no runs");
    CHECK(ct_shard_desc_tp(&d, 4, 6, 1, 1, 2) == CT_OK, "split");
    CHECK(ct_shard_desc_intersect(&d, 10, 22, 40, NULL) == 0, "range after the tensor (ends at 22)");
    CHECK(ct_shard_desc_intersect(&d, 10, 12, 11, NULL) == 0, "inverted range");
    d = ct_shard_desc_make(0, 7, -1, 0, 0);
    it = CT_SHARD_ITER_INIT;
    CHECK(ct_shard_desc_valid(&d) && ct_shard_desc_global_numel(&d) == 0 && !ct_shard_next_run(&d, &it, &r),
          "empty tensor");
    d = ct_shard_desc_make(5, 7, 1, 7, 0);  // an empty column slice at the end
    it = CT_SHARD_ITER_INIT;
    CHECK(ct_shard_desc_valid(&d) && !ct_shard_next_run(&d, &it, &r), "empty slice");
    // Intersecting twice narrows to the overlap of both ranges.
    CHECK(ct_shard_desc_tp(&d, 4, 6, 0, 0, 1) == CT_OK, "whole");
    ct_shard_desc_intersect(&d, 0, 5, 20, NULL);
    CHECK(ct_shard_desc_intersect(&d, 0, 0, 9, &pos) == 4 && d.flat_begin == 5 && pos == 5, "twice: [5,9)");
}

static void test_constructor_and_validity(void) {
    ct_shard_desc d;
    long s[2];
    CHECK(ct_shard_desc_tp(&d, 12, 8, 1, 3, 4) == CT_OK && d.tp_start == 6 && d.tp_count == 2, "cols split");
    ct_shard_desc_local_shape(&d, s);
    CHECK(s[0] == 12 && s[1] == 2 && ct_shard_desc_slice_numel(&d) == 24 && ct_shard_desc_global_numel(&d) == 96,
          "local shape %ld x %ld", s[0], s[1]);
    CHECK(d.replicated_over == 0 && d.stage == 0, "split tensors are not replicated over tp");
    CHECK(ct_shard_desc_tp(&d, 12, 1, -1, 1, 2) == CT_OK && d.replicated_over == CT_DIM_BIT(CT_DIM_TP) &&
              d.flat_count == 12,
          "a norm weight under tp 2 is replicated over tp");
    CHECK(ct_shard_desc_tp(&d, 12, 1, -1, 0, 1) == CT_OK && d.replicated_over == 0, "no tp: no replication");
    CHECK(ct_shard_desc_tp(&d, 12, 8, 0, 0, 5) == CT_ERR && strstr(ct_last_error(), "divide"), "5 !| 12: %s",
          ct_last_error());
    CHECK(ct_shard_desc_tp(&d, 12, 8, 0, 2, 2) == CT_ERR, "rank out of range");
    CHECK(ct_shard_desc_tp(&d, 12, 8, 2, 0, 2) == CT_ERR, "bad tp_dim");
    d = ct_shard_desc_make(4, 6, 1, 4, 3);
    CHECK(!ct_shard_desc_valid(&d), "slice past the last column");
    d = ct_shard_desc_make(4, 6, 0, 1, 2);
    d.flat_begin = 5;
    d.flat_count = 8;
    CHECK(!ct_shard_desc_valid(&d), "flat range past the slice");
    d.flat_count = 7;
    CHECK(ct_shard_desc_valid(&d), "flat range up to the end");
    d.replicated_over = 1u << CT_DIM_COUNT;
    CHECK(!ct_shard_desc_valid(&d), "unknown mesh dimension");
}

// For every replicated mask over a 2×2×2×2×2 mesh, each set of identical copies has one owner.
static void test_owns_copy_once_per_replica_set(void) {
    for (unsigned mask = 0; mask < (1u << CT_DIM_COUNT); mask++) {
        ct_shard_desc d = ct_shard_desc_make(3, 3, -1, 0, 0);
        d.replicated_over = mask;
        int owners[1 << CT_DIM_COUNT] = {0};  // by the coordinates outside the mask
        for (int r = 0; r < (1 << CT_DIM_COUNT); r++) {
            int coord[CT_DIM_COUNT];
            for (int k = 0; k < CT_DIM_COUNT; k++) coord[k] = (r >> k) & 1;
            if (ct_shard_desc_owns_copy(&d, coord)) owners[r & ~(int)mask]++;
        }
        for (int r = 0; r < (1 << CT_DIM_COUNT); r++)
            CHECK(owners[r] == ((r & (int)mask) ? 0 : 1), "mask %#x: copy set %#x has %d owners", mask, r, owners[r]);
    }
}

int main(void) {
    CT_RUN(test_runs_match_reference_all_subranges);
    CT_RUN(test_union_covers_each_element_once);
    CT_RUN(test_run_shapes);
    CT_RUN(test_empty);
    CT_RUN(test_constructor_and_validity);
    CT_RUN(test_owns_copy_once_per_replica_set);
    CT_TEST_EXIT();
}

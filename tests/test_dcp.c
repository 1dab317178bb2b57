// The distributed checkpoint's file layer (checkpoint/dcp.h), without MPI: pieces written under
// one simulated layout (tensor-parallel slices of rows or columns, FSDP flat shards with
// padding) read back under every other one; the manifest's round trip; verification; the step
// folders' bookkeeping.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/dcp.h"
#include "expect_error.h"
#include "test.h"
#include "test_rand.h"

static char root[] = "/tmp/ct_test_dcp_XXXXXX";

// Two global tensors: W (rows x cols, split by tp over rows or columns) and n (cols, never
// split: replicated over tp).
enum { ROWS = 12, COLS = 8 };
static float W[3][ROWS * COLS], N[3][COLS];  // [kind] the truth, one array per param / moment

typedef struct {
    int tp, tp_dim;  // tp degree and which dimension of W it splits (0 rows, 1 columns)
    int fsdp;        // flat shards of each tp rank's (W slice ++ n) group, padded to a multiple
} layout;

// Descriptors rank (tp_rank, shard) holds under layout l: W's and n's parts, and where each
// sits in that rank's shard buffer. Returns the shard size.
static long rank_descs(const layout *l, int tp_rank, int shard, ct_shard_desc d[2], long pos[2]) {
    ct_shard_desc_tp(&d[0], ROWS, COLS, l->tp_dim, tp_rank, l->tp);
    ct_shard_desc_tp(&d[1], COLS, 1, -1, tp_rank, l->tp);
    long nw = ct_shard_desc_slice_numel(&d[0]), total = nw + COLS;
    long per = (total + l->fsdp - 1) / l->fsdp;  // padded: the last shard may hold padding
    long lo = (long)shard * per, hi = lo + per;
    ct_shard_desc_intersect(&d[0], 0, lo, hi, &pos[0]);
    ct_shard_desc_intersect(&d[1], nw, lo, hi, &pos[1]);
    return per;
}

// Fills a rank's local values of descriptor d from the truth.
static void gather_truth(const ct_shard_desc *d, const float *truth, float *dst) {
    ct_shard_iter it = CT_SHARD_ITER_INIT;
    ct_shard_run r;
    while (ct_shard_next_run(d, &it, &r)) memcpy(dst + r.local, truth + r.global, (size_t)r.len * sizeof(float));
}

// Writes a checkpoint of the truth under layout l into dir (every rank's file, and a manifest).
// Only tp rank 0 writes n (the owner of the replicated copies).
static void write_layout(const char *dir, const layout *l, bool with_optim) {
    mkdir(dir, 0755);
    ct_dcp_manifest m = {.step = 7, .optimizer_step = 7, .world_size = l->tp * l->fsdp, .seq_len = 16};
    snprintf(m.layout, sizeof m.layout, "tp %d (dim %d) x fsdp %d", l->tp, l->tp_dim, l->fsdp);
    snprintf(m.model.flavor, sizeof m.model.flavor, "test");
    m.model.dim = COLS;
    m.model.n_layers = m.model.n_heads = m.model.n_kv_heads = m.model.ffn_hidden = m.model.vocab_size = 1;
    m.model.norm_eps = 1e-5;
    m.model.rope_theta = 5e5;
    m.model.qk_norm = 1;  // recorded only when set: the round trip below reads it back
    m.files = calloc((size_t)m.world_size, sizeof *m.files);
    for (int t = 0; t < l->tp; t++)
        for (int s = 0; s < l->fsdp; s++) {
            ct_shard_desc d[2];
            long pos[2];
            rank_descs(l, t, s, d, pos);
            static float buf[2][3][ROWS * COLS];  // [tensor][kind] local values
            ct_dcp_piece pieces[2];
            int n = 0;
            const char *names[2] = {"layers.0.w", "layers.0.norm"};
            const float *truth[2][3] = {{W[0], W[1], W[2]}, {N[0], N[1], N[2]}};
            for (int i = 0; i < 2; i++) {
                if (d[i].flat_count == 0 || (i == 1 && t != 0)) continue;
                pieces[n] = (ct_dcp_piece){.name = names[i], .desc = d[i]};
                for (int k = 0; k < 3; k++) {
                    gather_truth(&d[i], truth[i][k], buf[i][k]);
                    pieces[n].data[k] = buf[i][k];
                }
                n++;
            }
            if (!n) continue;
            ct_dcp_file *f = &m.files[m.n_files++];
            snprintf(f->name, sizeof f->name, "rank-%05d.safetensors", t * l->fsdp + s);
            char path[CT_DCP_PATH + 80];
            snprintf(path, sizeof path, "%s/%s", dir, f->name);
            CHECK(ct_dcp_write_pieces(path, pieces, n, with_optim, f) == CT_OK, "%s", ct_last_error());
        }
    m.model_only = !with_optim;
    CHECK(ct_dcp_write_manifest(dir, &m) == CT_OK, "%s", ct_last_error());
    ct_dcp_manifest_free(&m);
}

// Reads every rank's part under layout l back from dir and compares with the truth.
static int read_layout(const char *dir, const layout *l) {
    ct_dcp_manifest m;
    if (ct_dcp_read_manifest(dir, &m)) {
        CHECK(0, "%s", ct_last_error());
        return 0;
    }
    ct_dcp_reader *r = ct_dcp_open(dir, &m);
    CHECK(r, "%s", ct_last_error());
    int compared = 0;
    for (int t = 0; r && t < l->tp; t++)
        for (int s = 0; s < l->fsdp; s++) {
            ct_shard_desc d[2];
            long pos[2];
            rank_descs(l, t, s, d, pos);
            const char *names[2] = {"layers.0.w", "layers.0.norm"};
            const float *truth[2][3] = {{W[0], W[1], W[2]}, {N[0], N[1], N[2]}};
            for (int i = 0; i < 2; i++)
                for (int k = 0; k < 3 && d[i].flat_count; k++) {
                    float got[ROWS * COLS], want[ROWS * COLS];
                    CHECK(ct_dcp_read(r, names[i], (ct_dcp_kind)k, &d[i], got) == CT_OK, "%s", ct_last_error());
                    gather_truth(&d[i], truth[i][k], want);
                    CHECK(!memcmp(got, want, (size_t)d[i].flat_count * sizeof(float)),
                          "%s%s differs (tp %d rank %d, shard %d)", names[i], ct_dcp_kind_suffix((ct_dcp_kind)k), l->tp,
                          t, s);
                    compared++;
                }
        }
    ct_dcp_close(r);
    ct_dcp_manifest_free(&m);
    return compared;
}

static const layout layouts[] = {
    {1, 0, 1}, {2, 0, 1}, {2, 1, 1}, {4, 1, 1}, {1, 0, 3}, {2, 1, 3}, {4, 0, 2}, {2, 0, 5}, {4, 1, 7},
};
enum { NL = sizeof layouts / sizeof layouts[0] };

static void test_every_layout_reads_every_other(void) {
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < ROWS * COLS; i++) W[k][i] = frand(1);
        for (int i = 0; i < COLS; i++) N[k][i] = frand(1);
    }
    for (int a = 0; a < NL; a++) {
        char dir[200];
        snprintf(dir, sizeof dir, "%s/layout%d", root, a);
        write_layout(dir, &layouts[a], true);
        for (int b = 0; b < NL; b++) CHECK(read_layout(dir, &layouts[b]) > 0, "nothing compared");
    }
}

static void test_manifest_round_trip(void) {
    char dir[200];
    snprintf(dir, sizeof dir, "%s/layout5", root);
    ct_dcp_manifest m;
    CHECK(ct_dcp_read_manifest(dir, &m) == CT_OK, "%s", ct_last_error());
    CHECK(m.step == 7 && m.optimizer_step == 7 && m.world_size == 6 && !m.model_only && m.seq_len == 16, "fields");
    CHECK(!strcmp(m.layout, "tp 2 (dim 1) x fsdp 3") && m.model.dim == COLS && m.model.norm_eps == 1e-5, "strings");
    CHECK(m.model.qk_norm == 1, "qk_norm %d", m.model.qk_norm);
    CHECK(m.n_files == 6, "%d files", m.n_files);
    for (int i = 0; i < m.n_files; i++) CHECK(ct_dcp_verify_file(dir, &m.files[i]) == CT_OK, "%s", ct_last_error());
    ct_dcp_manifest_free(&m);
}

static void test_verification_names_the_bad_file(void) {
    char dir[200], path[300];
    snprintf(dir, sizeof dir, "%s/layout1", root);
    ct_dcp_manifest m;
    CHECK(ct_dcp_read_manifest(dir, &m) == CT_OK, "%s", ct_last_error());
    snprintf(path, sizeof path, "%s/%s", dir, m.files[1].name);
    FILE *f = fopen(path, "r+b");
    fseek(f, 200, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 200, SEEK_SET);
    fputc(c ^ 1, f);  // one bit
    fclose(f);
    EXPECT_ERROR(ct_dcp_verify_file(dir, &m.files[1]), CT_E_DATA, path, m.files[1].name, "CRC-32");
    CHECK(truncate(path, 100) == 0, "truncate");
    EXPECT_ERROR(ct_dcp_verify_file(dir, &m.files[1]), CT_E_DATA, path, "100 bytes, the manifest says");
    unlink(path);
    EXPECT_ERROR(ct_dcp_verify_file(dir, &m.files[1]), CT_E_IO, path, "No such file");
    ct_dcp_manifest_free(&m);
}

static void test_missing_pieces_are_named(void) {
    // A model-only checkpoint has no moments; a missing rank file leaves elements uncovered.
    char dir[200];
    snprintf(dir, sizeof dir, "%s/model_only", root);
    write_layout(dir, &layouts[2], false);
    ct_dcp_manifest m;
    CHECK(ct_dcp_read_manifest(dir, &m) == CT_OK && m.model_only, "%s", ct_last_error());
    ct_dcp_reader *r = ct_dcp_open(dir, &m);
    ct_shard_desc whole = ct_shard_desc_make(ROWS, COLS, -1, 0, 0);
    float got[ROWS * COLS];
    CHECK(ct_dcp_read(r, "layers.0.w", CT_DCP_PARAM, &whole, got) == CT_OK, "%s", ct_last_error());
    CHECK(ct_dcp_read(r, "layers.0.w", CT_DCP_EXP_AVG, &whole, got) == CT_ERR &&
              strstr(ct_last_error(), "no layers.0.w.exp_avg"),
          "%s", ct_last_error());
    ct_shard_desc other = ct_shard_desc_make(ROWS, COLS + 1, -1, 0, 0);
    CHECK(ct_dcp_read(r, "layers.0.w", CT_DCP_PARAM, &other, got) == CT_ERR && strstr(ct_last_error(), "12 x 8"),
          "%s", ct_last_error());
    ct_dcp_close(r);
    m.n_files = 1;  // as if the second rank's file were not listed
    r = ct_dcp_open(dir, &m);
    CHECK(ct_dcp_read(r, "layers.0.w", CT_DCP_PARAM, &whole, got) == CT_ERR &&
              strstr(ct_last_error(), "holds 48 of the 96 elements of layers.0.w"),
          "%s", ct_last_error());
    ct_dcp_close(r);
    m.n_files = 2;
    ct_dcp_manifest_free(&m);
}

// A hand-made checkpoint in root/NAME: two rank files, each one piece of W (layers.0.w) as
// `descs` describe it. Returns a reader (NULL on failure) and the manifest in *m.
static ct_dcp_reader *two_pieces(const char *name, const ct_shard_desc descs[2], ct_dcp_manifest *m) {
    char dir[200];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    mkdir(dir, 0755);
    *m = (ct_dcp_manifest){.step = 7, .optimizer_step = 7, .world_size = 2, .seq_len = 16, .model_only = true};
    snprintf(m->layout, sizeof m->layout, "hand-made");
    snprintf(m->model.flavor, sizeof m->model.flavor, "test");
    m->model.dim = COLS;
    m->model.n_layers = m->model.n_heads = m->model.n_kv_heads = m->model.ffn_hidden = m->model.vocab_size = 1;
    m->model.norm_eps = 1e-5;
    m->model.rope_theta = 5e5;
    m->files = calloc(2, sizeof *m->files);
    static float buf[2][ROWS * COLS];
    for (int f = 0; f < 2; f++) {
        ct_dcp_piece p = {.name = "layers.0.w", .desc = descs[f]};
        gather_truth(&p.desc, W[0], buf[f]);
        p.data[CT_DCP_PARAM] = buf[f];
        ct_dcp_file *file = &m->files[m->n_files++];
        snprintf(file->name, sizeof file->name, "rank-%05d.safetensors", f);
        char path[CT_DCP_PATH + 80];
        snprintf(path, sizeof path, "%s/%s", dir, file->name);
        CHECK(ct_dcp_write_pieces(path, &p, 1, false, file) == CT_OK, "%s", ct_last_error());
    }
    CHECK(ct_dcp_write_manifest(dir, m) == CT_OK, "%s", ct_last_error());
    ct_dcp_manifest_free(m);
    CHECK(ct_dcp_read_manifest(dir, m) == CT_OK, "%s", ct_last_error());
    ct_dcp_reader *r = ct_dcp_open(dir, m);
    CHECK(r, "%s", ct_last_error());
    return r;
}

// Two rank files whose pieces of W overlap (rows 0-7 and rows 4-11: rows 4-7 saved twice, the
// count 128 where the tensor has 96) are refused when read, with the one line saying so -- a
// count of elements copied that only had to reach the need would take either copy silently.
static void test_overlapping_pieces_are_refused(void) {
    ct_shard_desc descs[2] = {ct_shard_desc_make(ROWS, COLS, 0, 0, 8), ct_shard_desc_make(ROWS, COLS, 0, 4, 8)};
    ct_dcp_manifest m;
    ct_dcp_reader *r = two_pieces("overlap", descs, &m);
    ct_shard_desc whole = ct_shard_desc_make(ROWS, COLS, -1, 0, 0);
    float got[ROWS * COLS];
    CHECK(r && ct_dcp_read(r, "layers.0.w", CT_DCP_PARAM, &whole, got) == CT_ERR &&
              strstr(ct_last_error(), "pieces of layers.0.w overlap") && strstr(ct_last_error(), "128") &&
              strstr(ct_last_error(), "96") && strstr(ct_last_error(), "element 32 (row 4, column 0) twice") &&
              !strchr(ct_last_error(), '\n'),
          "%s", r ? ct_last_error() : "not opened");
    ct_dcp_close(r);
    ct_dcp_manifest_free(&m);
}

// Pieces that overlap by exactly as much as they leave out: as many elements copied as the
// tensor has, yet a hole. Rows 0-5 and 3-8 (rows 3-5 twice, rows 9-11 in neither), and columns
// 0-4 and 3-5 (columns 3-4 twice, 6-7 in neither: a column slice is one run per row). Each is
// refused naming the tensor and the first element no piece holds; a count alone passed both.
static void test_overlap_hiding_a_gap_is_refused(void) {
    const struct {
        const char *name;
        ct_shard_desc descs[2];
        const char *first;
    } cases[] = {
        {"gap_rows", {ct_shard_desc_make(ROWS, COLS, 0, 0, 6), ct_shard_desc_make(ROWS, COLS, 0, 3, 6)},
         "element 72 (row 9, column 0) is in no saved piece"},
        {"gap_cols", {ct_shard_desc_make(ROWS, COLS, 1, 0, 5), ct_shard_desc_make(ROWS, COLS, 1, 3, 3)},
         "element 6 (row 0, column 6) is in no saved piece"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ct_dcp_manifest m;
        ct_dcp_reader *r = two_pieces(cases[c].name, cases[c].descs, &m);
        ct_shard_desc whole = ct_shard_desc_make(ROWS, COLS, -1, 0, 0);
        float got[ROWS * COLS];
        CHECK(r && ct_dcp_read(r, "layers.0.w", CT_DCP_PARAM, &whole, got) == CT_ERR &&
                  strstr(ct_last_error(), "96 of the 96 elements of layers.0.w") &&
                  strstr(ct_last_error(), cases[c].first) && strstr(ct_last_error(), "saved twice") &&
                  !strchr(ct_last_error(), '\n'),
              "%s: %s", cases[c].name, r ? ct_last_error() : "not opened");
        // A request inside what the pieces hold is still read, and right.
        ct_shard_desc part = ct_shard_desc_make(ROWS, COLS, 0, 0, 2);
        if (c == 1) part = ct_shard_desc_make(ROWS, COLS, 1, 0, 3);
        float want[ROWS * COLS];
        gather_truth(&part, W[0], want);
        CHECK(r && ct_dcp_read(r, "layers.0.w", CT_DCP_PARAM, &part, got) == CT_OK &&
                  !memcmp(got, want, (size_t)part.flat_count * sizeof *got),
              "%s: a covered part: %s", cases[c].name, ct_last_error());
        ct_dcp_close(r);
        ct_dcp_manifest_free(&m);
    }
}

static void touch_dir(const char *folder, const char *name, bool manifest) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", folder, name);
    mkdir(p, 0755);
    if (!manifest) return;
    snprintf(p, sizeof p, "%s/%s/manifest.toml", folder, name);
    FILE *f = fopen(p, "w");
    fclose(f);
}

static void test_step_folders(void) {
    char folder[200];
    snprintf(folder, sizeof folder, "%s/ckpt", root);
    mkdir(folder, 0755);
    touch_dir(folder, "step-10", true);
    touch_dir(folder, "step-200", true);
    touch_dir(folder, "step-30", true);
    touch_dir(folder, "step-40", false);      // died before its manifest
    touch_dir(folder, "step-50.tmp", true);   // died before the rename
    touch_dir(folder, "step-x", true);        // not ours: left alone
    touch_dir(folder, "step-+5", true);
    int steps[8], bad = -1;
    int n = ct_dcp_list_steps(folder, steps, 8, &bad, NULL, NULL);
    CHECK(n == 3 && steps[0] == 10 && steps[1] == 30 && steps[2] == 200 && bad == 2, "n %d bad %d", n, bad);
    CHECK(ct_dcp_remove_incomplete(folder, NULL) == 2, "removed");
    char p[400];
    snprintf(p, sizeof p, "%s/step-x", folder);
    struct stat sb;
    CHECK(stat(p, &sb) == 0, "a folder not named step-N was removed");
    n = ct_dcp_list_steps(folder, steps, 8, &bad, NULL, NULL);
    CHECK(n == 3 && bad == 0, "n %d bad %d", n, bad);
    CHECK(ct_dcp_list_steps("/nonexistent/ckpt", steps, 8, &bad, NULL, NULL) == 0 && bad == 0, "missing folder");
}

static void test_manifest_refusals(void) {
    char dir[200], path[300];
    snprintf(dir, sizeof dir, "%s/bad", root);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/manifest.toml", dir);
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"format = \"other\"\n", "format 'other'"},
        {"format = \"ctitan-checkpoint\"\nversion = 2\n", "'version' = 2 out of range"},
        {"format = \"ctitan-checkpoint\"\nversion = 1\n", "'model_only' missing"},
        {"format = \"ctitan-checkpoint\"\nversion = 1\nmodel_only = false\nstep = -1\n", "'step' = -1 out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(path, "w");
        fputs(cases[i].text, f);
        fclose(f);
        ct_dcp_manifest m;
        EXPECT_ERROR(ct_dcp_read_manifest(dir, &m), CT_E_DATA, path, cases[i].want, "manifest.toml");
    }
    // A file entry that would reach outside the step folder.
    char good[200];
    snprintf(good, sizeof good, "%s/layout0/manifest.toml", root);
    FILE *in = fopen(good, "r");
    static char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, in);
    fclose(in);
    text[n] = 0;
    char *name = strstr(text, "rank-00000.safetensors");
    CHECK(name != NULL, "no rank file in the manifest");
    if (name) memcpy(name, "../../../etc/passwd\"\0", 21);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    ct_dcp_manifest m;
    EXPECT_ERROR(ct_dcp_read_manifest(dir, &m), CT_E_DATA, path, "not a plain file name");
}

int main(void) {
    rng_state = 0x5eed0dcbULL;
    if (!mkdtemp(root)) return 1;
    CT_RUN(test_every_layout_reads_every_other);
    CT_RUN(test_manifest_round_trip);
    CT_RUN(test_verification_names_the_bad_file);
    CT_RUN(test_missing_pieces_are_named);
    CT_RUN(test_overlapping_pieces_are_refused);
    CT_RUN(test_overlap_hiding_a_gap_is_refused);
    CT_RUN(test_step_folders);
    CT_RUN(test_manifest_refusals);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd)) return 1;
    CT_TEST_EXIT();
}

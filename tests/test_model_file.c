// Model files: save -> load round trips (fp32 exact, bf16 within rounding) checked through the
// raw safetensors reader against hand-computed names, shapes and offsets; every refusal of a bad
// file (missing / reshaped / unexpected tensor, bad dtype, bad metadata) fed its bad case; and
// the trainer's side: export at the end of a run, `ctitan eval` on the exported file equal to
// the trainer's validation loss and to a forward over windows cut by hand from the shard, and a
// run started from the file (checkpoint.initial_load_path) whose first loss is the file's loss.
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/model_file.h"
#include "cli/commands.h"
#include "comm/comm.h"
#include "core/memory.h"
#include "core/rng.h"
#include "data/shard.h"
#include "model/weights.h"
#include "model/runner.h"
#include "test.h"
#include "train/trainer.h"

static char tmpdir[64];

static const char *tmp_path(const char *name) {
    static char buf[8][128];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

// dim 32, 2 layers, 4 heads of 8, 2 kv heads, FFN 40, vocabulary 61.
static ct_model_config tiny(void) {
    ct_model_config m = {.family = ct_model_family_find("llama3")};
    strcpy(m.flavor, "test");
    m.dim = 32;
    m.n_layers = 2;
    m.n_heads = 4;
    m.n_kv_heads = 2;
    m.head_dim = 8;
    m.ffn_hidden = 40;
    m.vocab_size = 61;
    m.norm_eps = 1e-5;
    m.rope_theta = 10000;
    m.rope_scaling = 1;
    m.max_seq_len = 16;
    return m;
}

static float *random_block(const ct_param_table *t, uint64_t seed) {
    float *b = ct_xmalloc((size_t)t->total * sizeof(float));
    ct_rng r;
    ct_rng_seed(&r, seed);
    for (long i = 0; i < t->total; i++) b[i] = ct_rng_next_normal(&r);
    return b;
}

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static void test_roundtrip_fp32(void) {
    ct_model_config m = tiny();
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = random_block(&t, 1);
    const char *path = tmp_path("fp32.safetensors");
    CHECK(ct_model_save(path, &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());

    // The raw file, read independently: 3 + 9 L tensors under TorchTitan names and real shapes.
    ct_st_file *f = ct_st_open(path);
    CHECK(f != NULL, "%s", ct_last_error());
    if (f) {
        CHECK(ct_st_num_tensors(f) == 21, "got %d tensors", ct_st_num_tensors(f));
        const ct_st_tensor *wk = ct_st_find(f, "layers.1.attention.wk.weight");
        CHECK(wk && wk->dtype == CT_F32 && wk->ndim == 2 && wk->shape[0] == 16 && wk->shape[1] == 32, "wk shape");
        // Hand layout: embedding 61*32 = 1952; a layer is 32 + 1024 + 512 + 512 + 1024 + 32 + 2*1280 + 1280
        // = 6976; layer 1's wk follows its attention_norm (32) and wq (1024): 1952 + 6976 + 1056 = 9984.
        if (wk) CHECK(!memcmp(wk->data, block + 9984, 16 * 32 * sizeof(float)), "wk data at offset 9984");
        const ct_st_tensor *nw = ct_st_find(f, "norm.weight");
        CHECK(nw && nw->ndim == 1 && nw->shape[0] == 32, "norm.weight is 1-D [32]");
        const ct_st_tensor *w2 = ct_st_find(f, "layers.0.feed_forward.w2.weight");
        CHECK(w2 && w2->ndim == 2 && w2->shape[0] == 32 && w2->shape[1] == 40, "w2 is [C, F]");
        const ct_st_tensor *out = ct_st_find(f, "output.weight");
        CHECK(out && out->shape[0] == 61 && out->shape[1] == 32, "output is [V, C]");
        CHECK(ct_st_find(f, "layers.1.attention_norm.weight") && ct_st_find(f, "tok_embeddings.weight") &&
                  ct_st_find(f, "layers.1.feed_forward.w3.weight"),
              "names");
        const char *fmt = ct_st_metadata(f, "format"), *dim = ct_st_metadata(f, "dim");
        const char *kv = ct_st_metadata(f, "n_kv_heads"), *ffn = ct_st_metadata(f, "ffn_hidden");
        CHECK(fmt && !strcmp(fmt, "ctitan-llama3"), "format %s", fmt ? fmt : "(none)");
        CHECK(dim && !strcmp(dim, "32") && kv && !strcmp(kv, "2") && ffn && !strcmp(ffn, "40"), "metadata");
        ct_st_close(f);
    }

    ct_model_config m2;
    CHECK(ct_model_load_config(path, &m2) == CT_OK, "%s", ct_last_error());
    CHECK(!strcmp(m2.flavor, "test") && m2.dim == 32 && m2.n_layers == 2 && m2.n_heads == 4 && m2.n_kv_heads == 2 &&
              m2.head_dim == 8 && m2.ffn_hidden == 40 && m2.vocab_size == 61 && m2.rope_scaling == 1 &&
              m2.max_seq_len == 16,
          "config read back");
    CHECK(m2.norm_eps == 1e-5 && m2.rope_theta == 10000, "doubles exact: %.17g %.17g", m2.norm_eps, m2.rope_theta);
    CHECK(ct_model_config_match(&m2, &m) == CT_OK, "%s", ct_last_error());

    float *back = ct_xmalloc((size_t)t.total * sizeof(float));
    memset(back, 0xff, (size_t)t.total * sizeof(float));
    CHECK(ct_model_load(path, &t, back) == CT_OK, "%s", ct_last_error());
    CHECK(!memcmp(back, block, (size_t)t.total * sizeof(float)), "fp32 round trip is bit-exact");

    // load_all builds the registry from the file alone.
    ct_model_config m3;
    ct_param_table t3;
    float *b3;
    CHECK(ct_model_load_all(path, &m3, &t3, &b3) == CT_OK, "%s", ct_last_error());
    if (b3) {
        CHECK(t3.total == t.total && !memcmp(b3, block, (size_t)t.total * sizeof(float)), "load_all");
        free(b3);
        ct_param_table_free(&t3);
    }
    // Partial reads (what each FSDP rank does).
    ct_model_file *mf = ct_model_open(path, &t);
    CHECK(mf != NULL, "%s", ct_last_error());
    if (mf) {
        const ct_param *p = ct_param_find(&t, "layers.0.feed_forward.w1.weight");
        float part[100];
        ct_model_read_range(mf, p, 333, 100, part);
        CHECK(!memcmp(part, block + p->offset + 333, sizeof part), "range read");
        ct_model_close(mf);
    }
    free(back);
    free(block);
    ct_param_table_free(&t);
}

static void test_roundtrip_bf16(void) {
    ct_model_config m = tiny();
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = random_block(&t, 2);
    const char *path = tmp_path("bf16.safetensors");
    CHECK(ct_model_save(path, &t, &m, block, CT_BF16) == CT_OK, "%s", ct_last_error());
    struct stat st;
    stat(path, &st);
    CHECK(st.st_size < (off_t)(t.total * 2 + 8192), "file holds 2 bytes per element (%lld bytes)",
          (long long)st.st_size);
    ct_st_file *f = ct_st_open(path);
    if (f) {
        const ct_st_tensor *x = ct_st_find(f, "layers.0.attention.wq.weight");
        CHECK(x && x->dtype == CT_BF16, "stored as BF16");
        ct_st_close(f);
    }
    float *back = ct_xmalloc((size_t)t.total * sizeof(float));
    CHECK(ct_model_load(path, &t, back) == CT_OK, "%s", ct_last_error());
    long changed = 0, bad = 0, not_bf16 = 0;
    for (long i = 0; i < t.total; i++) {
        // Round to nearest: off by at most half a bf16 ulp, <= 2^-8 of the magnitude.
        if (fabs((double)back[i] - block[i]) > fabs((double)block[i]) * (1.0 / 256)) bad++;
        changed += back[i] != block[i];
        uint32_t u;
        memcpy(&u, &back[i], 4);
        not_bf16 += (u & 0xffff) != 0;
    }
    CHECK(bad == 0, "%ld elements off by more than half a bf16 ulp", bad);
    CHECK(not_bf16 == 0, "%ld loaded values are not bf16 values", not_bf16);
    CHECK(changed > t.total / 2, "rounding happened (%ld of %ld changed)", changed, t.total);
    free(back);
    free(block);
    ct_param_table_free(&t);
}

// A file written by hand with the writer: the registry's tensors, one of them missing,
// reshaped, retyped, or an extra one added, and metadata with one key removed or replaced.
typedef struct {
    const char *skip;         // tensor left out
    const char *reshape;      // tensor written with shape (shape0, shape1, ndim)
    int64_t shape[2];
    int ndim;
    const char *as_i32;       // tensor written as I32
    const char *extra;        // extra tensor name
    const char *meta_drop;    // metadata key left out
    const char *meta_key, *meta_value;  // metadata key given another value
} variant;

static void write_variant(const char *path, const variant *v) {
    ct_model_config m = tiny();
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = random_block(&t, 3);
    static int32_t ints[64];
    const char *meta[][2] = {{"format", "ctitan-llama3"}, {"flavor", "test"}, {"dim", "32"},
                             {"n_layers", "2"},           {"n_heads", "4"},   {"n_kv_heads", "2"},
                             {"vocab_size", "61"},        {"ffn_hidden", "40"}, {"norm_eps", "1e-05"},
                             {"rope_theta", "10000"},     {"rope_scaling", "1"}, {"qk_norm", "0"}};
    ct_st_writer *w = ct_st_writer_new();
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) {
        if (v->meta_drop && !strcmp(v->meta_drop, meta[i][0])) continue;
        const char *val = v->meta_key && !strcmp(v->meta_key, meta[i][0]) ? v->meta_value : meta[i][1];
        ct_st_writer_metadata(w, meta[i][0], val);
    }
    for (int i = 0; i < t.count; i++) {
        const ct_param *p = &t.params[i];
        if (v->skip && !strcmp(v->skip, p->name)) continue;
        int64_t shape[2] = {p->shape[0], p->shape[1]};
        int ndim = p->ndim;
        if (v->reshape && !strcmp(v->reshape, p->name)) {
            shape[0] = v->shape[0];
            shape[1] = v->shape[1];
            ndim = v->ndim;
        }
        if (v->as_i32 && !strcmp(v->as_i32, p->name))
            ct_st_writer_add(w, p->name, CT_I32, ndim, shape, CT_I32, ints);
        else
            ct_st_writer_add(w, p->name, CT_F32, ndim, shape, CT_F32, block + p->offset);
    }
    if (v->extra) {
        int64_t shape[1] = {32};
        ct_st_writer_add(w, v->extra, CT_F32, 1, shape, CT_F32, block);
    }
    if (ct_st_writer_write(w, path)) ct_fatal("test", "%s", ct_last_error());
    ct_st_writer_free(w);
    free(block);
    ct_param_table_free(&t);
}

// Loads the variant against the tiny registry; returns the error text ("" when it loaded).
static const char *load_variant(const variant *v, int via_config) {
    static char msg[1024];
    const char *path = tmp_path("variant.safetensors");
    write_variant(path, v);
    ct_model_config m = tiny();
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *b = ct_xmalloc((size_t)t.total * sizeof(float));
    ct_status st = via_config ? ct_model_load_config(path, &m) : ct_model_load(path, &t, b);
    snprintf(msg, sizeof msg, "%s", st == CT_OK ? "" : ct_last_error());
    free(b);
    ct_param_table_free(&t);
    return msg;
}

static void test_bad_tensors(void) {
    variant ok = {0};
    CHECK(!strcmp(load_variant(&ok, 0), ""), "the unmodified hand-written file loads: %s", load_variant(&ok, 0));
    CHECK(!strcmp(load_variant(&ok, 1), ""), "its config loads");

    variant missing = {.skip = "layers.1.feed_forward.w3.weight"};
    const char *e = load_variant(&missing, 0);
    CHECK(contains(e, "missing tensor layers.1.feed_forward.w3.weight") && contains(e, "[40, 32]"), "%s", e);

    variant shape = {.reshape = "layers.0.attention.wk.weight", .shape = {32, 16}, .ndim = 2};
    e = load_variant(&shape, 0);
    CHECK(contains(e, "layers.0.attention.wk.weight") && contains(e, "has shape [32, 16]") &&
              contains(e, "expected [16, 32]"),
          "%s", e);

    variant norm2d = {.reshape = "norm.weight", .shape = {32, 1}, .ndim = 2};
    e = load_variant(&norm2d, 0);
    CHECK(contains(e, "norm.weight") && contains(e, "[32, 1]") && contains(e, "expected [32]"), "%s", e);

    variant extra = {.extra = "layers.0.attention.wq.bias"};
    e = load_variant(&extra, 0);
    CHECK(contains(e, "unexpected tensor layers.0.attention.wq.bias"), "%s", e);

    variant ints = {.as_i32 = "layers.1.ffn_norm.weight"};
    e = load_variant(&ints, 0);
    CHECK(contains(e, "layers.1.ffn_norm.weight") && contains(e, "I32"), "%s", e);
}

static void test_bad_metadata(void) {
    variant v = {.meta_drop = "format"};
    const char *e = load_variant(&v, 1);
    CHECK(contains(e, "'format'"), "%s", e);
    v = (variant){.meta_key = "format", .meta_value = "gpt2"};
    e = load_variant(&v, 1);
    CHECK(contains(e, "format 'gpt2'"), "%s", e);
    v = (variant){.meta_drop = "n_kv_heads"};
    e = load_variant(&v, 1);
    CHECK(contains(e, "'n_kv_heads'"), "%s", e);
    v = (variant){.meta_key = "n_heads", .meta_value = "four"};
    e = load_variant(&v, 1);
    CHECK(contains(e, "'n_heads'") && contains(e, "not an integer"), "%s", e);
    v = (variant){.meta_key = "n_heads", .meta_value = "5"};
    e = load_variant(&v, 1);
    CHECK(contains(e, "n_heads 5 does not divide dim 32"), "%s", e);
    v = (variant){.meta_key = "rope_theta", .meta_value = "1e5x"};
    e = load_variant(&v, 1);
    CHECK(contains(e, "'rope_theta'") && contains(e, "not a number"), "%s", e);
    v = (variant){.meta_key = "vocab_size", .meta_value = "0"};
    e = load_variant(&v, 1);
    CHECK(contains(e, "vocab_size") && contains(e, "positive"), "%s", e);
    v = (variant){.meta_key = "qk_norm", .meta_value = "2"};
    e = load_variant(&v, 1);
    CHECK(contains(e, "metadata qk_norm 2, expected 0 or 1"), "%s", e);

    // Not a safetensors file at all.
    const char *p = tmp_path("junk.safetensors");
    FILE *f = fopen(p, "wb");
    fputs("hello", f);
    fclose(f);
    ct_model_config m;
    CHECK(ct_model_load_config(p, &m) == CT_ERR && contains(ct_last_error(), p), "%s", ct_last_error());
    CHECK(ct_model_load_config(tmp_path("absent.safetensors"), &m) == CT_ERR, "absent file");

    ct_dtype d;
    CHECK(ct_model_dtype_parse("bf16", &d) == CT_OK && d == CT_BF16, "bf16");
    CHECK(ct_model_dtype_parse("fp16", &d) == CT_ERR && contains(ct_last_error(), "fp16"), "fp16 refused");
    ct_model_config a = tiny(), b = tiny();
    b.dim = 64;
    CHECK(ct_model_config_match(&a, &b) == CT_ERR && contains(ct_last_error(), "dim 32") &&
              contains(ct_last_error(), "64"),
          "%s", ct_last_error());
    b = tiny();
    b.norm_eps = 1e-6;
    CHECK(ct_model_config_match(&a, &b) == CT_ERR && contains(ct_last_error(), "norm_eps"), "%s", ct_last_error());
    CHECK(ct_model_save(tmp_path("x.safetensors"), NULL, &a, NULL, CT_F16) == CT_ERR, "F16 export refused");
}

// ------------------------------------------------------------------ with the trainer

enum { V = 131, T = 16, MB = 2, VAL_STEPS = 3, N_TRAIN = 3000, N_VAL = 700 };
static int32_t val_tokens[N_VAL];

static void write_shards(const char *dir) {
    mkdir(dir, 0755);
    static int32_t train[N_TRAIN];
    ct_rng r;
    ct_rng_seed(&r, 42);
    // A little structure (each token often follows from the previous) so training moves the loss.
    for (int i = 0; i < N_TRAIN; i++) train[i] = i && ct_rng_next_float(&r) < 0.5f ? (train[i - 1] * 7 + 3) % V : (int32_t)(ct_rng_next(&r) % V);
    for (int i = 0; i < N_VAL; i++) val_tokens[i] = i && ct_rng_next_float(&r) < 0.5f ? (val_tokens[i - 1] * 7 + 3) % V : (int32_t)(ct_rng_next(&r) % V);
    char p[600];
    snprintf(p, sizeof p, "%s/train_000.bin", dir);
    if (ct_shard_write(p, train, N_TRAIN, V)) ct_fatal("test", "%s", ct_last_error());
    snprintf(p, sizeof p, "%s/val_000.bin", dir);
    if (ct_shard_write(p, val_tokens, N_VAL, V)) ct_fatal("test", "%s", ct_last_error());
}

static void tiny_train_config(ct_config *c, const char *data, const char *dump, int seed) {
    ct_config_defaults(c);
    char seed_s[16];
    snprintf(seed_s, sizeof seed_s, "%d", seed);
    const char *kv[][2] = {
        {"model.dim", "32"},          {"model.n_layers", "2"},       {"model.n_heads", "4"},
        {"model.n_kv_heads", "2"},    {"model.vocab_size", "131"},   {"model.ffn_hidden_dim", "72"},
        {"training.seq_len", "16"},   {"training.steps", "3"},       {"training.dataset", data},
        {"micro_batch_size", "2"},    {"lr_scheduler.warmup_steps", "1"}, {"metrics.peak_tflops", "1"},
        {"training.seed", seed_s},    {"validation.enable", "true"}, {"validation.steps", "3"},
        {"validation.freq", "100"},   {"job.dump_folder", dump},     {"optimizer.lr", "0.01"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (ct_config_set(c, kv[i][0], kv[i][1])) ct_fatal("test", "%s", ct_last_error());
}

// Runs `ctitan eval` in-process with stdout captured; returns the "loss X" it printed (NAN if none).
static double run_eval_cmd(int argc, char **argv, int *rc) {
    const char *cap = tmp_path("eval_stdout.txt");
    fflush(stdout);
    int saved = dup(1), fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    close(fd);
    *rc = ct_cmd_eval(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    double loss = NAN;
    FILE *f = fopen(cap, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "loss ", 5)) loss = strtod(line + 5, NULL);
    if (f) fclose(f);
    return loss;
}

static char data_dir[128], dump_a[128];

static void test_export_and_eval(void) {
    static ct_config c;
    static ct_trainer t;
    snprintf(data_dir, sizeof data_dir, "%s", tmp_path("shards"));
    snprintf(dump_a, sizeof dump_a, "%s", tmp_path("run_a"));
    write_shards(data_dir);
    tiny_train_config(&c, data_dir, dump_a, 7);
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_OK, "%s", ct_last_error());
    fflush(stdout);
    int saved = dup(1), devnull = open("/dev/null", O_WRONLY);  // the run's log lines
    dup2(devnull, 1);
    int rc = ct_trainer_run(&t);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(devnull);
    CHECK(rc == 0, "run failed: %s", ct_last_error());
    double val = ct_trainer_validate(&t);  // the weights that were exported
    char model[200];
    snprintf(model, sizeof model, "%s/model.safetensors", dump_a);
    CHECK(access(model, R_OK) == 0, "run exported %s", model);

    // bf16 export of the same weights: within bf16 rounding of the gathered block.
    const char *bpath = tmp_path("run_a_bf16.safetensors");
    t.cfg.ckpt_export_dtype = CT_CFG_BF16;
    CHECK(ct_trainer_export(&t, bpath) == CT_OK, "%s", ct_last_error());
    float *full = ct_xmalloc((size_t)t.table.total * sizeof(float));
    ct_fsdp_gather_full(&t.fsdp, full);
    long total = t.table.total;
    ct_trainer_free(&t);

    ct_model_config m;
    ct_param_table tab;
    float *fb = NULL, *bb = NULL;
    CHECK(ct_model_load_all(model, &m, &tab, &fb) == CT_OK, "%s", ct_last_error());
    if (!fb) return;
    CHECK(tab.total == total && !memcmp(fb, full, (size_t)total * sizeof(float)), "fp32 export == gathered model");
    CHECK(m.max_seq_len == T && m.ffn_hidden == 72 && m.vocab_size == V, "exported config");
    ct_param_table tb;
    ct_model_config mb;
    CHECK(ct_model_load_all(bpath, &mb, &tb, &bb) == CT_OK, "%s", ct_last_error());
    if (bb) {
        long bad = 0;
        for (long i = 0; i < total; i++) bad += fabs((double)bb[i] - full[i]) > fabs((double)full[i]) / 256;
        CHECK(bad == 0, "%ld bf16 elements beyond rounding", bad);
        free(bb);
        ct_param_table_free(&tb);
    }

    // Independent reference: windows cut by hand from the val tokens (window w = tokens
    // [w T, w T + T], in order), forward with the file's weights.
    ct_model_weights w;
    ct_model_weights_init(&w, &tab, &m, fb);
    ct_model_acts a;
    ct_model_acts_init(&a, &m, MB, T);
    int32_t in[MB * T], tg[MB * T];
    double sum = 0;
    for (int s = 0; s < VAL_STEPS; s++) {
        for (int b = 0; b < MB; b++) {
            long w0 = (long)(s * MB + b) * T;
            for (int i = 0; i < T; i++) {
                in[b * T + i] = val_tokens[w0 + i];
                tg[b * T + i] = val_tokens[w0 + i + 1];
            }
        }
        sum += ct_model_step(&a, &w, NULL, in, tg, 0);
    }
    double ref = sum / (VAL_STEPS * MB * T);
    CHECK_CLOSE(val, ref, 1e-6, 1e-7);

    char *argv[] = {"--model", model, "--data", data_dir, "--split", "val", "--seq_len", "16", "--batch", "2", "--steps", "3"};
    double got = run_eval_cmd(12, argv, &rc);
    CHECK(rc == 0, "eval rc %d", rc);
    CHECK_CLOSE(got, val, 0, 2e-6);  // printed with 6 decimals

    // Defaults: T from the file (16), B 1, one pass over the split: 699 / 16 = 43 windows.
    char *argv2[] = {"--model", model, "--data", data_dir};
    got = run_eval_cmd(4, argv2, &rc);
    ct_model_acts_free(&a);
    ct_model_acts_init(&a, &m, 1, T);
    sum = 0;
    for (int s = 0; s < (N_VAL - 1) / T; s++) {
        for (int i = 0; i < T; i++) {
            in[i] = val_tokens[s * T + i];
            tg[i] = val_tokens[s * T + i + 1];
        }
        sum += ct_model_step(&a, &w, NULL, in, tg, 0);
    }
    CHECK(rc == 0, "eval rc %d", rc);
    CHECK_CLOSE(got, sum / (((N_VAL - 1) / T) * T), 0, 2e-6);

    ct_model_acts_free(&a);
    ct_model_weights_free(&w);
    free(fb);
    free(full);
    ct_param_table_free(&tab);
}

static void test_eval_bad_args(void) {
    char model[200];
    snprintf(model, sizeof model, "%s/model.safetensors", dump_a);
    int rc;
    char *a1[] = {"--model", model};
    run_eval_cmd(2, a1, &rc);
    CHECK(rc != 0, "no --data");
    char *a2[] = {"--model", (char *)tmp_path("absent.safetensors"), "--data", data_dir};
    run_eval_cmd(4, a2, &rc);
    CHECK(rc != 0, "absent model");
    char *a3[] = {"--model", model, "--data", data_dir, "--batch", "0"};
    run_eval_cmd(6, a3, &rc);
    CHECK(rc != 0, "batch 0");
    char *a4[] = {"--model", model, "--data", data_dir, "--seq_len", "1000"};
    run_eval_cmd(6, a4, &rc);
    CHECK(rc != 0, "seq_len longer than the split");
    char *a5[] = {"--model", model, "--data", data_dir, "--bogus", "1"};
    run_eval_cmd(6, a5, &rc);
    CHECK(rc != 0, "unknown option");
}

// The mask and positions a model was trained with travel in its metadata; an older file
// (neither key) reads as causal with sequence positions. Evaluating a block_causal model needs an
// EOS id from the data or the model: shards and a model recording none are refused in one line.
static void test_mask_record(void) {
    ct_model_config m = tiny(), back;
    m.vocab_size = V;  // the shards' vocabulary
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = random_block(&t, 5);
    const char *plain = tmp_path("causal.safetensors"), *bc = tmp_path("block_causal.safetensors");
    CHECK(ct_model_save(plain, &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());
    CHECK(ct_model_load_config(plain, &back) == CT_OK && !back.block_causal && !back.document_positions,
          "causal model read as block_causal %d document positions %d", back.block_causal, back.document_positions);
    m.block_causal = 1, m.document_positions = 1;
    CHECK(ct_model_save(bc, &t, &m, block, CT_F32) == CT_OK, "%s", ct_last_error());
    CHECK(ct_model_load_config(bc, &back) == CT_OK && back.block_causal == 1 && back.document_positions == 1,
          "block_causal model read as block_causal %d document positions %d", back.block_causal,
          back.document_positions);

    const char *err = tmp_path("eval_stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    int rc;
    char *a[] = {"--model", (char *)bc, "--data", data_dir};
    double loss = run_eval_cmd(4, a, &rc);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char msg[2048] = "";
    FILE *f = fopen(err, "r");
    size_t n = f ? fread(msg, 1, sizeof msg - 1, f) : 0;
    msg[n] = 0;
    if (f) fclose(f);
    CHECK(rc != 0 && isnan(loss), "block_causal eval on data without an EOS id: rc %d loss %g", rc, loss);
    CHECK(contains(msg, "block_causal") && contains(msg, "EOS") && strchr(msg, '\n') == msg + strlen(msg) - 1,
          "message: %s", msg);
    free(block);
    ct_param_table_free(&t);
}

// checkpoint.initial_load_path: another seed (so initialisation alone would differ), the first
// step's loss must be the exported model's loss on that step's batch.
static void test_initial_load(void) {
    static ct_config c;
    static ct_trainer t;
    char model[200];
    snprintf(model, sizeof model, "%s/model.safetensors", dump_a);
    tiny_train_config(&c, data_dir, tmp_path("run_b"), 99);
    snprintf(c.ckpt_initial_load_path, sizeof c.ckpt_initial_load_path, "%s", model);
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_OK, "%s", ct_last_error());
    float *start = ct_xmalloc((size_t)t.table.total * sizeof(float));
    ct_fsdp_gather_full(&t.fsdp, start);
    double loss0 = ct_trainer_step(&t);

    ct_model_config m;
    ct_param_table tab;
    float *fb = NULL;
    CHECK(ct_model_load_all(model, &m, &tab, &fb) == CT_OK, "%s", ct_last_error());
    if (fb) {
        CHECK(!memcmp(start, fb, (size_t)tab.total * sizeof(float)), "trainer starts from the file's weights");
        ct_model_weights w;
        ct_model_weights_init(&w, &tab, &m, fb);
        ct_model_acts a;
        ct_model_acts_init(&a, &m, MB, T);
        long valid = 0;
        for (int i = 0; i < MB * T; i++) valid += t.host_targets[i] >= 0;  // the cpu reference: host tokens
        double ref = ct_model_step(&a, &w, NULL, t.host_inputs, t.host_targets, 0) / (double)valid;
        CHECK_CLOSE(loss0, ref, 1e-6, 1e-7);
        ct_model_acts_free(&a);
        ct_model_weights_free(&w);
        free(fb);
        ct_param_table_free(&tab);
    }
    free(start);
    ct_trainer_free(&t);

    // A model file of other dimensions is refused, naming the difference.
    tiny_train_config(&c, data_dir, tmp_path("run_c"), 99);
    ct_config_set(&c, "model.dim", "64");
    snprintf(c.ckpt_initial_load_path, sizeof c.ckpt_initial_load_path, "%s", model);
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_ERR && contains(ct_last_error(), "initial_load_path") &&
              contains(ct_last_error(), "dim 32") && contains(ct_last_error(), "64"),
          "%s", ct_last_error());
    ct_trainer_free(&t);
    tiny_train_config(&c, data_dir, tmp_path("run_d"), 99);
    snprintf(c.ckpt_initial_load_path, sizeof c.ckpt_initial_load_path, "%s", tmp_path("absent.safetensors"));
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_ERR && contains(ct_last_error(), "absent.safetensors"), "%s",
          ct_last_error());
    ct_trainer_free(&t);
}

int main(int argc, char **argv) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_model_file_XXXXXX");
    if (!mkdtemp(tmpdir)) ct_fatal("test", "mkdtemp failed");
    CT_RUN(test_roundtrip_fp32);
    CT_RUN(test_roundtrip_bf16);
    CT_RUN(test_bad_tensors);
    CT_RUN(test_bad_metadata);
    if (ct_comm_init(&argc, &argv)) ct_fatal("test", "%s", ct_last_error());
    CT_RUN(test_export_and_eval);
    CT_RUN(test_eval_bad_args);
    CT_RUN(test_mask_record);
    CT_RUN(test_initial_load);
    ct_comm_finalize();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    CT_TEST_EXIT();
}

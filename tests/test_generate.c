// KV-cache decoding and sampling. The reference for decoding is the training forward
// (ct_model_step) run on every prefix with one target: its loss is -log p(next token | prefix),
// which the cached decoder must reproduce (prefill of k tokens, in chunks, then one by one).
// Greedy tokens are checked against the argmin of those reference losses over the whole
// vocabulary; the sampler against hand-worked distributions; `ctitan generate` end to end.
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/model_file.h"
#include "cli/commands.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/generate.h"
#include "model/weights.h"
#include "model/runner.h"
#include "model/sampler.h"
#include "test.h"

static ct_model_config tiny(int n_heads, int n_kv_heads, int rope_scaling, int V) {
    ct_model_config m = {0};
    strcpy(m.flavor, "test");
    m.dim = 32;
    m.n_layers = 2;
    m.n_heads = n_heads;
    m.n_kv_heads = n_kv_heads;
    m.head_dim = m.dim / n_heads;
    m.ffn_hidden = 40;
    m.vocab_size = V;
    m.norm_eps = 1e-5;
    m.rope_theta = rope_scaling ? 500000 : 10000;
    m.rope_scaling = rope_scaling;
    m.max_seq_len = 16;
    return m;
}

typedef struct {
    ct_model_config m;
    ct_param_table t;
    float *block;
    ct_model_weights w;
} model;

// Initialised as training does, then perturbed (std 0.3) so the next-token distributions are far
// from uniform and the attention pattern matters.
static void model_init(model *r, ct_model_config m, uint64_t seed) {
    r->m = m;
    ct_param_table_build(&r->t, &m);
    r->block = ct_xmalloc((size_t)r->t.total * sizeof(float));
    ct_param_init_all(&r->t, seed, r->block);
    ct_rng g;
    ct_rng_seed(&g, seed * 31 + 1);
    for (long i = 0; i < r->t.total; i++) r->block[i] += 0.3f * ct_rng_next_normal(&g);
    ct_model_weights_init(&r->w, &r->t, &m, r->block);
}

static void model_free(model *r) {
    ct_model_weights_free(&r->w);
    free(r->block);
    ct_param_table_free(&r->t);
}

// -log p(next | tokens[0..n)) by the training forward on the prefix, one valid target.
static double ref_nll(model *r, const int32_t *tokens, long n, int32_t next) {
    ct_model_acts a;
    ct_model_acts_init(&a, &r->m, 1, n);
    int32_t *tg = ct_xmalloc((size_t)n * sizeof(int32_t));
    for (long i = 0; i < n; i++) tg[i] = -1;
    tg[n - 1] = next;
    double loss = ct_model_step(&a, &r->w, NULL, tokens, tg, 0);
    free(tg);
    ct_model_acts_free(&a);
    return loss;
}

static double nll_from_logits(const float *logits, long V, int32_t next) {
    double mx = -INFINITY, s = 0;
    for (long v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    for (long v = 0; v < V; v++) s += exp((double)logits[v] - mx);
    return mx + log(s) - logits[next];
}

// Prefill k tokens (chunks of max_rows), then decode one by one; every position's next-token
// log-probability against the per-prefix forward.
static double kv_max_err(ct_model_config m, long S, long k, long max_rows, long max_T) {
    model r;
    model_init(&r, m, 5);
    int32_t *tok = ct_xmalloc((size_t)S * sizeof(int32_t));
    ct_rng g;
    ct_rng_seed(&g, 77 + S + k);
    for (long i = 0; i < S; i++) tok[i] = (int32_t)(ct_rng_next(&g) % m.vocab_size);
    ct_generator gen;
    ct_gen_init(&gen, &m, &r.w, max_T, max_rows);
    double worst = 0;
    const float *logits = ct_gen_feed(&gen, tok, k);
    for (long t = k - 1; t < S - 1; t++) {
        if (t >= k) logits = ct_gen_feed(&gen, &tok[t], 1);
        if (!logits) return INFINITY;
        double e = fabs(nll_from_logits(logits, m.vocab_size, tok[t + 1]) - ref_nll(&r, tok, t + 1, tok[t + 1]));
        if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
    }
    ct_gen_free(&gen);
    free(tok);
    model_free(&r);
    return worst;
}

static void test_kv_cache_matches_full_forward(void) {
    struct {
        int nh, nkv, scaling;
        long S, k, rows, maxT;
    } cases[] = {
        {4, 2, 1, 12, 4, 0, 12},    // GQA, prefill 4 then 7 single steps
        {4, 2, 1, 12, 1, 0, 12},    // everything one token at a time
        {4, 2, 1, 12, 11, 3, 20},   // prefill in chunks of 3 rows, cache larger than needed
        {4, 4, 0, 10, 5, 2, 10},    // multi-head, no RoPE scaling
        {4, 1, 1, 9, 3, 0, 9},      // one kv head (MQA)
        {2, 2, 1, 70, 67, 0, 70},   // prefill longer than one 64-row attention tile
    };
    double worst = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double e = kv_max_err(tiny(cases[i].nh, cases[i].nkv, cases[i].scaling, 61), cases[i].S, cases[i].k,
                              cases[i].rows, cases[i].maxT);
        CHECK(e <= 1e-4, "case %zu: max |log p difference| %.3g", i, e);
        worst = e > worst ? e : worst;
    }
    printf("  kv cache vs full forward: max |log p difference| %.2g\n", worst);
}

static void test_feed_errors(void) {
    model r;
    ct_model_config m = tiny(4, 2, 1, 61);
    model_init(&r, m, 1);
    ct_generator gen;
    ct_gen_init(&gen, &m, &r.w, 5, 0);
    int32_t tok[6] = {1, 2, 3, 4, 5, 6};
    CHECK(ct_gen_feed(&gen, tok, 6) == NULL && strstr(ct_last_error(), "do not fit"), "%s", ct_last_error());
    CHECK(ct_gen_feed(&gen, tok, 3) != NULL, "3 fit");
    CHECK(ct_gen_feed(&gen, tok, 3) == NULL && strstr(ct_last_error(), "3 of 5"), "%s", ct_last_error());
    int32_t badtok[1] = {61};
    CHECK(ct_gen_feed(&gen, badtok, 1) == NULL && strstr(ct_last_error(), "61"), "%s", ct_last_error());
    CHECK(ct_gen_feed(&gen, tok, 0) == NULL, "empty feed");
    CHECK(gen.len == 3, "failed feeds leave the cache alone (len %ld)", gen.len);
    ct_gen_free(&gen);
    model_free(&r);
}

// Greedy decoding: each token is the argmin over the vocabulary of the reference loss.
static void test_greedy_matches_reference_argmax(void) {
    model r;
    ct_model_config m = tiny(4, 2, 1, 61);
    model_init(&r, m, 9);
    int32_t seq[16] = {3, 14, 15, 9, 26};
    long n = 5, steps = 5;
    ct_generator gen;
    ct_gen_init(&gen, &m, &r.w, n + steps, 0);
    ct_sampler s;
    ct_sampler_init(&s, m.vocab_size, 0.0f, 0, 1);
    int32_t out[8], out2[8];
    long got = ct_gen_run(&gen, &s, seq, n, steps, -1, out, NULL, NULL);
    CHECK(got == steps, "produced %ld", got);
    for (long i = 0; i < steps; i++) {
        int32_t best = 0;
        double best_loss = INFINITY;
        for (int32_t v = 0; v < m.vocab_size; v++) {
            double l = ref_nll(&r, seq, n + i, v);
            if (l < best_loss) best_loss = l, best = v;
        }
        CHECK(out[i] == best, "greedy token %ld: %d, reference argmax %d", i, out[i], best);
        seq[n + i] = best;
    }
    long got2 = ct_gen_run(&gen, &s, seq, n, steps, -1, out2, NULL, NULL);
    CHECK(got2 == steps && !memcmp(out, out2, sizeof(int32_t) * steps), "greedy repeats");
    // Stop token: stop at the first greedy token, which is kept in out.
    CHECK(ct_gen_run(&gen, &s, seq, n, steps, out[0], out2, NULL, NULL) == 1 && out2[0] == out[0], "stop id");
    // top_k = 1 at any temperature is greedy.
    ct_sampler s1;
    ct_sampler_init(&s1, m.vocab_size, 1.5f, 1, 3);
    CHECK(ct_gen_run(&gen, &s1, seq, n, steps, -1, out2, NULL, NULL) == steps &&
              !memcmp(out, out2, sizeof(int32_t) * steps),
          "top_k 1 == greedy");
    ct_sampler_free(&s1);
    ct_sampler_free(&s);
    ct_gen_free(&gen);
    model_free(&r);
}

static void test_seeded_sampling_repeats(void) {
    model r;
    ct_model_config m = tiny(4, 2, 1, 61);
    model_init(&r, m, 4);
    int32_t prompt[3] = {7, 8, 9};
    enum { NEW = 30 };
    int32_t a[NEW], b[NEW], c[NEW];
    ct_generator gen;
    ct_gen_init(&gen, &m, &r.w, 3 + NEW, 0);
    ct_sampler s;
    ct_sampler_init(&s, m.vocab_size, 2.0f, 20, 1234);
    CHECK(ct_gen_run(&gen, &s, prompt, 3, NEW, -1, a, NULL, NULL) == NEW, "a");
    ct_sampler_free(&s);
    ct_sampler_init(&s, m.vocab_size, 2.0f, 20, 1234);
    CHECK(ct_gen_run(&gen, &s, prompt, 3, NEW, -1, b, NULL, NULL) == NEW, "b");
    ct_sampler_free(&s);
    ct_sampler_init(&s, m.vocab_size, 2.0f, 20, 1235);
    CHECK(ct_gen_run(&gen, &s, prompt, 3, NEW, -1, c, NULL, NULL) == NEW, "c");
    ct_sampler_free(&s);
    CHECK(!memcmp(a, b, sizeof a), "same seed, same tokens");
    CHECK(memcmp(a, c, sizeof a), "another seed, other tokens");
    ct_gen_free(&gen);
    model_free(&r);
}

// Draw frequencies against hand-worked probabilities (4 sigma of 40000 draws is < 0.01).
static void freqs(ct_sampler *s, const float *logits, int V, int n, double *f) {
    for (int v = 0; v < V; v++) f[v] = 0;
    for (int i = 0; i < n; i++) f[ct_sampler_sample(s, logits)] += 1.0 / n;
}

static void test_sampler_distributions(void) {
    const float lg[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    double f[4];
    ct_sampler s;
    ct_sampler_init(&s, 4, 1.0f, 0, 11);
    freqs(&s, lg, 4, 40000, f);
    const double p1[4] = {0.4, 0.3, 0.2, 0.1};
    for (int v = 0; v < 4; v++) CHECK(fabs(f[v] - p1[v]) < 0.01, "T=1 id %d: %.4f vs %.2f", v, f[v], p1[v]);
    ct_sampler_free(&s);

    ct_sampler_init(&s, 4, 1.0f, 2, 12);  // top 2: 0.4 / 0.7, 0.3 / 0.7
    freqs(&s, lg, 4, 40000, f);
    const double p2[4] = {4.0 / 7, 3.0 / 7, 0, 0};
    for (int v = 0; v < 4; v++) CHECK(fabs(f[v] - p2[v]) < 0.01, "top2 id %d: %.4f vs %.4f", v, f[v], p2[v]);
    ct_sampler_free(&s);

    ct_sampler_init(&s, 4, 0.5f, 0, 13);  // T = 0.5 squares the probabilities: .16 .09 .04 .01 / .30
    freqs(&s, lg, 4, 40000, f);
    const double p3[4] = {16.0 / 30, 9.0 / 30, 4.0 / 30, 1.0 / 30};
    for (int v = 0; v < 4; v++) CHECK(fabs(f[v] - p3[v]) < 0.01, "T=.5 id %d: %.4f vs %.4f", v, f[v], p3[v]);
    ct_sampler_free(&s);

    // Greedy: the largest logit, the lowest id on a tie; V restricts the ids considered.
    const float tie[5] = {1, 3, 3, 0, 9};
    ct_sampler_init(&s, 4, 0.0f, 0, 1);
    CHECK(ct_sampler_sample(&s, tie) == 1, "tie goes to the lower id");
    ct_sampler_free(&s);

    // top_k = 5 of 100 random logits: every draw is among the 5 largest (found by a plain scan).
    float r[100];
    ct_rng g;
    ct_rng_seed(&g, 5);
    for (int i = 0; i < 100; i++) r[i] = 3 * ct_rng_next_normal(&g);
    int top[5];
    for (int j = 0; j < 5; j++) {
        int best = -1;
        for (int i = 0; i < 100; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= top[q] == i;
            if (!taken && (best < 0 || r[i] > r[best])) best = i;
        }
        top[j] = best;
    }
    ct_sampler_init(&s, 100, 5.0f, 5, 14);
    int outside = 0, seen[5] = {0};
    for (int i = 0; i < 5000; i++) {
        int id = ct_sampler_sample(&s, r), in = 0;
        for (int j = 0; j < 5; j++)
            if (top[j] == id) in = 1, seen[j] = 1;
        outside += !in;
    }
    CHECK(outside == 0, "%d draws outside the top 5", outside);
    CHECK(seen[0] && seen[1] && seen[2] && seen[3] && seen[4], "all top 5 drawn at T=5");
    ct_sampler_free(&s);
}

// ------------------------------------------------------------------ ctitan generate

static char tmpdir[64];

static const char *run_generate(int argc, char **argv, int *rc) {
    static char text[4096];
    char cap[128];
    snprintf(cap, sizeof cap, "%s/stdout.txt", tmpdir);
    fflush(stdout);
    int saved = dup(1), fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    close(fd);
    *rc = ct_cmd_generate(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *f = fopen(cap, "rb");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f) fclose(f);
    return text;
}

static void test_generate_cli(void) {
    // A byte-level tokenizer (258 ids: bytes, then <|begin_of_text|> 256, <|end_of_text|> 257)
    // and a random model over that vocabulary.
    const char *tok = "tests/fixtures/data/bytes.tiktoken";
    char path[128], small[128];
    snprintf(path, sizeof path, "%s/m.safetensors", tmpdir);
    snprintf(small, sizeof small, "%s/small.safetensors", tmpdir);
    model r;
    model_init(&r, tiny(4, 2, 1, 258), 3);
    CHECK(ct_model_save(path, &r.t, &r.m, r.block, CT_F32) == CT_OK, "%s", ct_last_error());
    model_free(&r);
    model_init(&r, tiny(4, 2, 1, 200), 3);  // too small for the tokenizer's special ids
    CHECK(ct_model_save(small, &r.t, &r.m, r.block, CT_F32) == CT_OK, "%s", ct_last_error());
    model_free(&r);

    int rc;
    char out1[4096], out2[4096];
    char *greedy[] = {"--model", path, "--tokenizer", (char *)tok, "--prompt", "Hello", "--max_new_tokens", "12",
                      "--temperature", "0"};
    snprintf(out1, sizeof out1, "%s", run_generate(10, greedy, &rc));
    CHECK(rc == 0, "greedy rc %d", rc);
    CHECK(!strncmp(out1, "Hello", 5), "output starts with the prompt: '%s'", out1);
    snprintf(out2, sizeof out2, "%s", run_generate(10, greedy, &rc));
    CHECK(!strcmp(out1, out2), "greedy output repeats");
    char *sampled[] = {"--model", path, "--tokenizer", (char *)tok, "--prompt", "Hello", "--max_new_tokens", "12",
                       "--temperature", "1.0", "--top_k", "50", "--seed", "5"};
    snprintf(out1, sizeof out1, "%s", run_generate(14, sampled, &rc));
    snprintf(out2, sizeof out2, "%s", run_generate(14, sampled, &rc));
    CHECK(rc == 0 && !strcmp(out1, out2), "seeded sampling repeats");
    char *zero[] = {"--model", path, "--tokenizer", (char *)tok, "--prompt", "Hi", "--max_new_tokens", "0"};
    CHECK(!strcmp(run_generate(8, zero, &rc), "Hi\n") && rc == 0, "0 new tokens prints the prompt");

    struct {
        int argc;
        char *argv[10];
        const char *why;
    } bad[] = {
        {4, {"--model", path, "--tokenizer", (char *)tok}, "no prompt"},
        {6, {"--model", "/nonexistent.safetensors", "--tokenizer", (char *)tok, "--prompt", "x"}, "absent model"},
        {6, {"--model", path, "--tokenizer", "/nonexistent.tiktoken", "--prompt", "x"}, "absent tokenizer"},
        {8, {"--model", path, "--tokenizer", (char *)tok, "--prompt", "x", "--temperature", "-1"}, "negative T"},
        {8, {"--model", path, "--tokenizer", (char *)tok, "--prompt", "x", "--top_k", "abc"}, "bad top_k"},
        {8, {"--model", path, "--tokenizer", (char *)tok, "--prompt", "x", "--max_new_tokens", "-3"}, "bad N"},
        {7, {"--model", path, "--tokenizer", (char *)tok, "--prompt", "x", "--seed"}, "missing value"},
        {8, {"--model", path, "--tokenizer", (char *)tok, "--prompt", "x", "--bogus", "1"}, "unknown option"},
        {6, {"--model", small, "--tokenizer", (char *)tok, "--prompt", "x"}, "vocabulary smaller than the tokenizer"},
        {6, {"--model", (char *)tok, "--tokenizer", (char *)tok, "--prompt", "x"}, "model is not safetensors"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_generate(bad[i].argc, bad[i].argv, &rc);
        CHECK(rc != 0, "%s: exit 0", bad[i].why);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_generate_XXXXXX");
    if (!mkdtemp(tmpdir)) ct_fatal("test", "mkdtemp failed");
    CT_RUN(test_kv_cache_matches_full_forward);
    CT_RUN(test_feed_errors);
    CT_RUN(test_greedy_matches_reference_argmax);
    CT_RUN(test_seeded_sampling_repeats);
    CT_RUN(test_sampler_distributions);
    CT_RUN(test_generate_cli);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    CT_TEST_EXIT();
}

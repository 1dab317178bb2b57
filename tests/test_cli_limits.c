// Command-line numbers out of range get a message about that number (finding 13 of issue 14):
//  - `generate --max_new_tokens 10000000` sized its KV cache for 10 million tokens up front
//    (2.8 GB for the debug model); the cache is now capped at the model's max sequence length
//    and generation stops there, saying so on stderr. Run with 1 GiB of address space beyond
//    what the process has mapped.
//  - `tokenizer train --vocab-size 99999999999` said "must be at least 258", and
//    `--vocab-size -5` said "needs --input": both now name the value and the range.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/model_file.h"
#include "cli/commands.h"
#include "core/rng.h"
#include "fatal_child.h"
#include "model/params.h"
#include "test.h"

static char tmpdir[64];

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// ---------------------------------------------------------------- generate

typedef struct {
    char **argv;
    int argc;
    const char *stdout_path;
} cli_call;

static void generate_limited(void *vc) {
    const cli_call *c = vc;
    ct_test_limit_address_space(1ul << 30);
    int fd = open(c->stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    close(fd);
    int rc = ct_cmd_generate(c->argc, c->argv);
    fflush(stdout);
    _exit(rc);
}

// Written in a child: the parameter initialisation runs OpenMP, and a process that has started
// OpenMP threads cannot use them in a forked child (the generate children below would hang).
static void make_model(void *vpath) {
    ct_model_config m = {0};
    strcpy(m.flavor, "test");
    m.dim = 32;
    m.n_layers = 2;
    m.n_heads = m.n_kv_heads = 4;
    m.head_dim = 8;
    m.ffn_hidden = 40;
    m.vocab_size = 258;  // the byte-level tokenizer's ids
    m.norm_eps = 1e-5;
    m.rope_theta = 10000;
    m.max_seq_len = 16;
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *block = malloc((size_t)t.total * sizeof(float));
    ct_param_init_all(&t, 7, block);
    if (ct_model_save(vpath, &t, &m, block, CT_F32) != CT_OK) {
        fprintf(stderr, "%s\n", ct_last_error());
        _exit(1);
    }
    _exit(0);
}

static void test_generate_max_new_tokens_capped(void) {
    char model[128], out[128], err[2048];
    snprintf(model, sizeof model, "%s/m.safetensors", tmpdir);
    snprintf(out, sizeof out, "%s/gen.txt", tmpdir);
    int rc = ct_test_run_fatal(make_model, model, err, sizeof err);
    CHECK(rc == 0, "model: %s", err);

    // Prompt "Hi": <|end_of_text|> + 2 bytes = 3 tokens, so 13 more fit the 16.
    char *argv[] = {"--model", model, "--tokenizer", "tests/fixtures/data/bytes.tiktoken", "--prompt", "Hi",
                    "--max_new_tokens", "10000000", "--temperature", "0"};
    cli_call c = {argv, 10, out};
    rc = ct_test_run_fatal(generate_limited, &c, err, sizeof err);
    CHECK(rc == 0 && strstr(err, "max_new_tokens") && strstr(err, "16"), "exit %d: %s", rc, err);
    FILE *f = fopen(out, "rb");
    char text[256] = {0};
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    // The prompt, at most 13 new bytes (fewer if <|end_of_text|> came), a newline.
    CHECK(n >= 3 && n <= 2 + 13 + 1 && !strncmp(text, "Hi", 2), "output %zu bytes: '%s'", n, text);

    // A prompt longer than the model's length is refused in one line.
    char *argv2[] = {"--model", model, "--tokenizer", "tests/fixtures/data/bytes.tiktoken", "--prompt",
                     "a prompt of more than sixteen bytes", "--max_new_tokens", "1"};
    cli_call c2 = {argv2, 8, out};
    rc = ct_test_run_fatal(generate_limited, &c2, err, sizeof err);
    CHECK(rc != 0 && count_lines(err) == 1 && strstr(err, "16"), "long prompt: exit %d: %s", rc, err);
}

// ---------------------------------------------------------------- tokenizer train

static void tokenizer_call(void *vc) {
    const cli_call *c = vc;
    _exit(ct_cmd_tokenizer(c->argc, c->argv));
}

static void expect_vocab_refused(const char *value) {
    char out[128];
    snprintf(out, sizeof out, "%s/t.tok", tmpdir);
    char *argv[] = {"train", "--input", "tests/fixtures/data/corpus", "--vocab-size", (char *)value, "--out", out};
    cli_call c = {argv, 7, NULL};
    char err[1024];
    int rc = ct_test_run_fatal(tokenizer_call, &c, err, sizeof err);
    CHECK(rc != 0 && count_lines(err) == 1 && strstr(err, "--vocab-size") && strstr(err, value) &&
              strstr(err, "2147483647") && !strstr(err, "needs --input"),
          "--vocab-size %s: exit %d: %s", value, rc, err);
}

static void test_tokenizer_vocab_size_out_of_range(void) {
    expect_vocab_refused("99999999999");
    expect_vocab_refused("-5");
    expect_vocab_refused("0");
    expect_vocab_refused("2147483648");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_clilim_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    CT_RUN(test_generate_max_new_tokens_capped);
    CT_RUN(test_tokenizer_vocab_size_out_of_range);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) return 1;
    CT_TEST_EXIT();
}

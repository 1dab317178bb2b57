// `ctitan generate --model FILE --tokenizer TOK --prompt TEXT [--max_new_tokens N]
//                  [--temperature T] [--top_k K] [--seed S]`
// Samples a continuation from a saved model with the KV-cache generator. The prompt is
// preceded by the tokenizer's EOS (<|end_of_text|> for a rank file), the separator every training
// document follows, and by BOS where the tokenizer adds one (tokenizer_config.json's
// add_bos_token), so the model reads it as the start of a document. The tokenizer must be the one
// the model file records (the tokenizer of its training data), where it records one. Prints the
// prompt, then each new token as it comes; stops at EOS (not printed), after N tokens, or at the
// model's max sequence length (N is capped there, with a note). Timing goes to stderr.
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint/model_file.h"
#include "cli/commands.h"
#include "cli/model_device.h"
#include "cli/options.h"
#include "data/tokenizer.h"
#include "model/generate.h"

// The sequence length a model file without max_seq_len is taken to have (Llama 3's 8192).
#define CT_GENERATE_DEFAULT_LEN 8192

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const ct_tokenizer *tok;
    int32_t eos;
} print_ctx;

static int print_token(void *vctx, int32_t id) {
    print_ctx *c = vctx;
    if (id == c->eos) return 1;
    long len;
    const char *bytes = ct_tokenizer_token(c->tok, id, &len);
    if (bytes) fwrite(bytes, 1, (size_t)len, stdout);
    fflush(stdout);
    return 0;
}

// The tokenizer is the one the model was trained with (its file records the training data's
// tokenizer; where it records none, `note` says the check cannot be made: printed once the run
// starts, so that a refusal stays one line), and it has an EOS.
static ct_status check_tokenizer(const ct_tokenizer *tok, const char *tok_path, const char *model_path, char *note,
                                 size_t note_size) {
    note[0] = 0;
    if (ct_tokenizer_eos(tok) < 0)
        return ct_set_error("%s: the tokenizer names no EOS token, which starts the prompt and ends generation: give "
                            "eos_token in the tokenizer_config.json beside it",
                            tok_path);
    ct_model_tok mt;
    if (ct_model_read_tok(model_path, &mt)) return CT_ERR;
    char hex[2 * CT_TOKENIZER_HASH_BYTES + 1];
    if (ct_tokenizer_hash_hex(tok, hex)) return CT_ERR;
    if (!mt.present) {
        snprintf(note, note_size, "ctitan generate: note: model %s records no tokenizer (saved before models recorded "
                                  "one, or converted): --tokenizer %s cannot be checked against it\n",
                 model_path, tok_path);
        return CT_OK;
    }
    int32_t bos = ct_tokenizer_bos(tok), eos = ct_tokenizer_eos(tok);
    if (strcmp(hex, mt.hash) || (mt.eos >= 0 && mt.eos != eos) || (mt.bos >= 0 && bos >= 0 && mt.bos != bos))
        return ct_set_error("--tokenizer %s (tokenizer %s, bos %d, eos %d) is not the one model %s was trained with "
                            "(tokenizer %s, bos %d, eos %d): give that tokenizer",
                            tok_path, hex, bos, eos, model_path, mt.hash, mt.bos, mt.eos);
    return CT_OK;
}

int ct_cmd_generate(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *prompt = NULL, *device = NULL;
    long max_new = 64, top_k = 0;
    double temperature = 0.8;
    unsigned long long seed = 1;
    const ct_opt opts[] = {
        {"model", 0, CT_OPT_STR, &model_path, "PATH", "the saved model (.safetensors), or a checkpoint's step-N folder", 0, 0},
        {"tokenizer", 0, CT_OPT_STR, &tok_path, "TOK", "the tokenizer it was trained with (rank file, tokenizer.json or its folder)", 0, 0},
        {"prompt", 0, CT_OPT_STR, &prompt, "TEXT", "the text to continue", 0, 0},
        {"max_new_tokens", 0, CT_OPT_LONG, &max_new, "N", "tokens to add at most (64)", 0, (double)LONG_MAX},
        {"temperature", 0, CT_OPT_DOUBLE, &temperature, "T", "sampling temperature (0.8; 0 = greedy)", 0, 1e300},
        {"top_k", 0, CT_OPT_LONG, &top_k, "K", "sample from the K likeliest tokens (0 = all)", 0, (double)LONG_MAX},
        {"seed", 0, CT_OPT_U64, &seed, "S", "sampling seed (1)", 0, 0},
        {"device", 0, CT_OPT_STR, &device, "NAME", CT_CLI_DEVICE_HELP, 0, 0},
    };
    const ct_opt_spec spec = {"ctitan generate", "--model FILE --tokenizer TOK --prompt TEXT [options]",
                              "Stops at the tokenizer's EOS, after N tokens, or at the length the model was trained at\n"
                              "(its max_seq_len; a warning says so when prompt + N would pass it).\n",
                              opts, (int)(sizeof opts / sizeof opts[0]), NULL, NULL};
    int prc = ct_opt_parse(&spec, argc, argv);
    if (prc) return prc == CT_OPT_HELP ? 0 : 2;
    if (!model_path || !tok_path || !prompt) {
        fprintf(stderr, "ctitan generate: needs --model, --tokenizer and --prompt\n");
        return 2;
    }
    const ct_kernels *k = ct_cli_device("ctitan generate", device);
    if (!k) return 2;

    char note[1200];
    ct_tokenizer *tok = ct_tokenizer_load(tok_path);
    if (!tok || check_tokenizer(tok, tok_path, model_path, note, sizeof note)) {
        fprintf(stderr, "ctitan generate: %s\n", ct_last_error());
        ct_tokenizer_free(tok);
        return 1;
    }
    ct_model_config m;
    ct_param_table table;
    float *block;
    if (ct_model_load_all(model_path, &m, &table, &block)) {
        fprintf(stderr, "ctitan generate: %s\n", ct_last_error());
        ct_tokenizer_free(tok);
        return 1;
    }
    if (ct_model_check_finite(&table, block)) {  // sampling from NaN logits means nothing
        fprintf(stderr, "ctitan generate: %s: %s\n", model_path, ct_last_error());
        free(block);
        ct_param_table_free(&table);
        ct_tokenizer_free(tok);
        return 1;
    }
    int rc = 1;
    int32_t eos = ct_tokenizer_eos(tok);
    int32_t *ids = NULL, *out = NULL;
    long n = 0, cap = 0;
    ct_model_weights w;
    float *placed = ct_cli_weights_on(k, block, table.total);
    ct_model_weights_init(&w, &table, &m, placed);
    if (eos >= m.vocab_size) {
        fprintf(stderr, "ctitan generate: the tokenizer's EOS id %d is outside the model's vocabulary %d "
                        "(was the model trained with this tokenizer?)\n", eos, m.vocab_size);
        goto done;
    }
    ids = malloc(sizeof *ids);
    cap = 1;
    ids[n++] = eos;
    // A document the model saw in training: [BOS when the tokenizer adds one] text EOS.
    if (ct_tokenizer_encode_doc(tok, prompt, (long)strlen(prompt), ct_tokenizer_add_bos(tok), 0, &ids, &n, &cap) < 0) {
        fprintf(stderr, "ctitan generate: %s\n", ct_last_error());
        goto done;
    }
    for (long i = 0; i < n; i++)
        if (ids[i] >= m.vocab_size) {
            fprintf(stderr, "ctitan generate: prompt token %d is outside the model's vocabulary %d\n", ids[i],
                    m.vocab_size);
            goto done;
        }

    // The KV cache is planned up front for prompt + continuation, so --max_new_tokens sizes an
    // allocation (10 million once asked for 2.8 GB): it is capped at the length the model was
    // trained for (max_seq_len; CT_GENERATE_DEFAULT_LEN when the file does not say), where
    // generation stops.
    const long limit = m.max_seq_len > 0 ? m.max_seq_len : CT_GENERATE_DEFAULT_LEN;
    if (n > limit) {
        fprintf(stderr, "ctitan generate: the prompt is %ld tokens (with EOS before it), more than the "
                        "model's max sequence length %ld\n", n, limit);
        goto done;
    }
    // Past the trained length the model meets positions it never saw (RoPE angles, attention
    // spans), so the text degrades without any error: say so, and stop there.
    if (max_new > limit - n) {
        if (m.max_seq_len > 0)
            fprintf(stderr, "ctitan generate: warning: prompt (%ld tokens) + --max_new_tokens %ld exceed the sequence "
                            "length the model was trained at (%ld); --max_new_tokens capped at %ld\n", n, max_new,
                    limit, limit - n);
        else
            fprintf(stderr, "ctitan generate: --max_new_tokens %ld capped at %ld: the model's max sequence length is "
                            "%ld (the file does not say; the default) and the prompt takes %ld\n", max_new, limit - n,
                    limit, n);
        max_new = limit - n;
    }

    // Sample only ids both the model and the tokenizer know.
    long V = ct_tokenizer_vocab_size(tok) < m.vocab_size ? ct_tokenizer_vocab_size(tok) : m.vocab_size;
    ct_sampler sampler;
    ct_sampler_init(&sampler, V, (float)temperature, (int)(top_k > V ? V : top_k), (uint64_t)seed);
    ct_generator gen;
    ct_gen_init_on(&gen, k, &m, &w, n + (max_new > 0 ? max_new : 1), 0);
    out = malloc((size_t)(max_new > 0 ? max_new : 1) * sizeof *out);

    fputs(note, stderr);
    fputs(prompt, stdout);
    fflush(stdout);
    print_ctx pc = {tok, eos};
    double t0 = now_s();
    long produced = max_new > 0 ? ct_gen_run(&gen, &sampler, ids, n, max_new, eos, out, print_token, &pc) : 0;
    double dt = now_s() - t0;
    printf("\n");
    if (produced < 0) {
        fprintf(stderr, "ctitan generate: %s\n", ct_last_error());
    } else {
        fprintf(stderr, "generate: %ld prompt tokens, %ld new in %.3f s (%.1f tokens/s)\n", n, produced, dt,
                dt > 0 ? (double)produced / dt : 0.0);
        rc = 0;
    }
    ct_gen_free(&gen);
    ct_sampler_free(&sampler);
done:
    free(out);
    free(ids);
    ct_model_weights_free(&w);
    ct_cli_weights_free(placed, block);
    free(block);
    ct_param_table_free(&table);
    ct_tokenizer_free(tok);
    return rc;
}

// `ctitan tokenizer train | encode | decode | info`: the tokenizer library from the command line.
//   train  --input FILE|DIR... --vocab-size N --out FILE   (each takes --help; cli/options.h)
//   encode --tokenizer TOK (--text "..." | --input FILE [--jsonl]) [--specials] [--bos] [--eos]
//                                                           -> ids on one line (a line per text)
//   decode --tokenizer TOK --ids "1 2 3"                    -> the bytes, as is
//   info   --tokenizer TOK                                  -> its form, sizes, bos / eos, hash
// TOK: a tiktoken rank file, a tokenizer.json, or a folder holding one (told apart by content).
// Errors are one line on stderr and a non-zero exit.
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/file_check.h"
#include "core/json.h"
#include "data/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctitan tokenizer train  --input FILE|DIR... --vocab-size N --out FILE\n"
            "       ctitan tokenizer encode --tokenizer TOK (--text TEXT | --input FILE [--jsonl]) [--specials] [--bos] [--eos]\n"
            "       ctitan tokenizer decode --tokenizer TOK --ids \"ID ID ...\"\n"
            "       ctitan tokenizer info   --tokenizer TOK\n"
            "train: byte-level BPE; N counts the 2 special tokens (<|begin_of_text|>, <|end_of_text|>).\n"
            "A DIR input means its regular files (sorted, not recursive). The output is a tiktoken\n"
            "rank file (\"base64 rank\" per line). TOK: a rank file, a Hugging Face tokenizer.json\n"
            "(byte-level BPE), or a folder holding one. encode prints ids separated by spaces; decode\n"
            "writes the bytes exactly (no newline added); info prints the tokenizer's hash, the one\n"
            "token shards record.\n");
}

static int fail(const char *fmt, const char *arg) {
    fprintf(stderr, "ctitan tokenizer: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 1;
}

#define N_OPTS(t) ((int)(sizeof(t) / sizeof((t)[0])))

static int cmd_train(int argc, char **argv) {
    ct_opt_list in = {0};
    long vocab = LONG_MIN;  // not given
    const char *out = NULL;
    const ct_opt opts[] = {
        {"input", 0, CT_OPT_LIST, &in, "FILE|DIR", "text files; a DIR means its regular files (sorted, not recursive)", 0, 0},
        {"vocab-size", 0, CT_OPT_LONG, &vocab, "N", "vocabulary size, counting the 2 special tokens (>= 258)", 0, 0},
        {"out", 0, CT_OPT_STR, &out, "FILE", "the tiktoken rank file to write", 0, 0},
    };
    const ct_opt_spec spec = {"ctitan tokenizer train", "--input FILE|DIR... --vocab-size N --out FILE",
                              "Byte-level BPE; the output is a tiktoken rank file (\"base64 rank\" per line).\n",
                              opts, N_OPTS(opts), NULL, NULL};
    int rc = ct_opt_parse(&spec, argc, argv);
    if (rc) {
        free(in.v);
        return rc == CT_OPT_HELP ? 0 : 2;
    }
    rc = 2;
    const char **inputs = in.v;
    int n_inputs = in.n;
    // The range here, so the message names this value (99999999999 once got "must be at least
    // 258"): 256 byte ranks + 2 specials at least, ids that fit an int32.
    if (vocab != LONG_MIN && (vocab < 258 || vocab > INT32_MAX)) {
        fprintf(stderr, "ctitan tokenizer train: --vocab-size %ld is outside [258, %d] (256 bytes + 2 special "
                        "tokens at least, ids that fit int32)\n", vocab, INT32_MAX);
        goto done;
    }
    if (!n_inputs || vocab == LONG_MIN || !out) {
        fprintf(stderr, "ctitan tokenizer train: needs --input, --vocab-size and --out\n");
        goto done;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (ct_tokenizer_train(inputs, n_inputs, vocab, out) != CT_OK) {
        rc = fail("%s", ct_last_error());
        goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("trained %ld ranks + 2 special tokens in %.2f s -> %s\n", vocab - 2,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), out);
    rc = 0;
done:
    free(in.v);
    return rc;
}

// encode --input: a text held in memory whole, so a regular file of at most 1 GiB (a FIFO or
// /dev/zero is refused before reading; core/file_check.h).
static char *read_all(const char *path, long *len) {
    char *buf;
    size_t n;
    if (ct_file_read_all(path, "text to encode", 1ull << 30, &buf, &n) != CT_OK) return NULL;
    *len = (long)n;
    return buf;
}

// One text's ids on one line: [BOS] text [EOS], special tokens in the text found or not.
static int encode_one(const ct_tokenizer *tok, const char *text, long len, bool specials, bool bos, bool eos) {
    int32_t *ids = NULL;
    long n = 0, cap = 0, r = 0;
    if (bos) r = ct_tokenizer_encode_doc(tok, "", 0, 1, 0, &ids, &n, &cap);
    if (r >= 0)
        r = specials ? ct_tokenizer_encode_special(tok, text, len, &ids, &n, &cap)
                     : ct_tokenizer_encode(tok, text, len, &ids, &n, &cap);
    if (r >= 0 && eos) r = ct_tokenizer_encode_doc(tok, "", 0, 0, 1, &ids, &n, &cap);
    if (r >= 0) {
        for (long i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    free(ids);
    return r < 0 ? -1 : 0;
}

// --jsonl: each line of the file is one JSON string, encoded on its own; a line of ids for each.
static int encode_lines(const ct_tokenizer *tok, const char *path, const char *buf, long len, bool specials, bool bos,
                        bool eos) {
    long line = 0;
    for (const char *p = buf, *end = buf + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        line++;
        char what[600];
        snprintf(what, sizeof what, "%s:%ld", path, line);
        ct_json *j = ct_json_parse(p, (size_t)(e - p), what);
        if (!j || j->type != CT_JSON_STRING) {
            if (j) ct_set_error("%s: not a JSON string (--jsonl: one JSON string per line)", what);
            ct_json_free(j);
            return fail("%s", ct_last_error());
        }
        int rc = encode_one(tok, j->string, (long)strlen(j->string), specials, bos, eos);
        ct_json_free(j);
        if (rc) return fail("%s", ct_last_error());
        p = e + 1;
    }
    return 0;
}

static int cmd_encode(int argc, char **argv) {
    const char *tok_path = NULL, *text = NULL, *input = NULL;
    bool bos = false, eos = false, specials = false, jsonl = false;
    const ct_opt opts[] = {
        {"tokenizer", 0, CT_OPT_STR, &tok_path, "TOK", "a tiktoken rank file, a tokenizer.json, or a folder holding one", 0, 0},
        {"text", 0, CT_OPT_STR, &text, "TEXT", "the text to encode", 0, 0},
        {"input", 0, CT_OPT_STR, &input, "FILE", "or a file to encode (at most 1 GiB)", 0, 0},
        {"jsonl", 0, CT_OPT_FLAG, &jsonl, NULL, "--input holds one JSON string per line: a line of ids for each", 0, 0},
        {"specials", 0, CT_OPT_FLAG, &specials, NULL,
         "special-token text in the input becomes its id, as Hugging Face tokenizers finds it (without: it is text)", 0, 0},
        {"bos", 0, CT_OPT_FLAG, &bos, NULL, "begin with the BOS token", 0, 0},
        {"eos", 0, CT_OPT_FLAG, &eos, NULL, "end with the EOS token", 0, 0},
    };
    const ct_opt_spec spec = {"ctitan tokenizer encode",
                              "--tokenizer TOK (--text TEXT | --input FILE [--jsonl]) [--specials] [--bos] [--eos]",
                              "Prints the ids on one line, separated by spaces (with --jsonl, one line per input line).\n",
                              opts, N_OPTS(opts), NULL, NULL};
    int prc = ct_opt_parse(&spec, argc, argv);
    if (prc) return prc == CT_OPT_HELP ? 0 : 2;
    if (!tok_path || !!text == !!input || (jsonl && !input)) {
        fprintf(stderr, "ctitan tokenizer encode: needs --tokenizer and one of --text, --input (--jsonl goes with --input)\n");
        return 2;
    }
    long len = text ? (long)strlen(text) : 0;
    char *buf = NULL;
    if (input && !(buf = read_all(input, &len))) return fail("%s", ct_last_error());
    ct_tokenizer *tok = ct_tokenizer_load(tok_path);
    if (!tok) {
        free(buf);
        return fail("%s", ct_last_error());
    }
    int rc = 0;
    if ((bos && ct_tokenizer_bos(tok) < 0) || (eos && ct_tokenizer_eos(tok) < 0)) {
        fprintf(stderr, "ctitan tokenizer encode: %s names no %s token: give %s in the tokenizer_config.json beside it\n",
                tok_path, bos && ct_tokenizer_bos(tok) < 0 ? "BOS" : "EOS",
                bos && ct_tokenizer_bos(tok) < 0 ? "bos_token" : "eos_token");
        rc = 1;
    } else if (jsonl) rc = encode_lines(tok, input, buf, len, specials, bos, eos);
    else if (encode_one(tok, text ? text : buf, len, specials, bos, eos)) rc = fail("%s", ct_last_error());
    free(buf);
    ct_tokenizer_free(tok);
    return rc;
}

static int cmd_info(int argc, char **argv) {
    const char *tok_path = NULL;
    const ct_opt opts[] = {
        {"tokenizer", 0, CT_OPT_STR, &tok_path, "TOK", "a tiktoken rank file, a tokenizer.json, or a folder holding one", 0, 0},
    };
    const ct_opt_spec spec = {"ctitan tokenizer info", "--tokenizer TOK",
                              "Prints the tokenizer's form, vocabulary, BOS / EOS and hash (docs/data_format.md).\n",
                              opts, N_OPTS(opts), NULL, NULL};
    int prc = ct_opt_parse(&spec, argc, argv);
    if (prc) return prc == CT_OPT_HELP ? 0 : 2;
    if (!tok_path) {
        fprintf(stderr, "ctitan tokenizer info: needs --tokenizer\n");
        return 2;
    }
    ct_tokenizer *tok = ct_tokenizer_load(tok_path);
    if (!tok) return fail("%s", ct_last_error());
    char hex[2 * CT_TOKENIZER_HASH_BYTES + 1];
    if (ct_tokenizer_hash_hex(tok, hex) != CT_OK) {
        ct_tokenizer_free(tok);
        return fail("%s", ct_last_error());
    }
    printf("%s: %s\n", tok_path, ct_tokenizer_is_json(tok) ? ct_tokenizer_json_path(tok) : "tiktoken rank file");
    printf("vocab %ld ids (%ld %s)\n", ct_tokenizer_vocab_size(tok), ct_tokenizer_n_ranks(tok),
           ct_tokenizer_is_json(tok) ? "in model.vocab" : "ranks");
    const char *names[2] = {"bos", "eos"};
    int32_t ids[2] = {ct_tokenizer_bos(tok), ct_tokenizer_eos(tok)};
    for (int k = 0; k < 2; k++) {
        long len = 0;
        const char *t = ids[k] >= 0 ? ct_tokenizer_token(tok, ids[k], &len) : NULL;
        if (t) printf("%s %d %.*s\n", names[k], ids[k], (int)len, t);
        else printf("%s none\n", names[k]);
    }
    printf("hash %s\n", hex);
    ct_tokenizer_free(tok);
    return 0;
}

static int cmd_decode(int argc, char **argv) {
    const char *tok_path = NULL, *id_text = NULL;
    const ct_opt opts[] = {
        {"tokenizer", 0, CT_OPT_STR, &tok_path, "TOK", "a tiktoken rank file, a tokenizer.json, or a folder holding one", 0, 0},
        {"ids", 0, CT_OPT_STR, &id_text, "\"ID ID ...\"", "token ids separated by spaces or commas", 0, 0},
    };
    const ct_opt_spec spec = {"ctitan tokenizer decode", "--tokenizer TOK --ids \"ID ID ...\"",
                              "Writes the bytes exactly (no newline added).\n", opts, N_OPTS(opts), NULL, NULL};
    int prc = ct_opt_parse(&spec, argc, argv);
    if (prc) return prc == CT_OPT_HELP ? 0 : 2;
    if (!tok_path || !id_text) {
        fprintf(stderr, "ctitan tokenizer decode: needs --tokenizer and --ids\n");
        return 2;
    }
    long n = 0, cap = 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    for (const char *p = id_text; ids;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX || (*end && !strchr(" ,\t\n", *end))) {
            free(ids);
            return fail("--ids: '%s' is not a list of integers", id_text);
        }
        if (n == cap) {
            int32_t *i2 = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!i2) free(ids);
            ids = i2;
            if (!ids) break;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (!ids) return fail("%s", "out of memory");
    ct_tokenizer *tok = ct_tokenizer_load(tok_path);
    if (!tok) {
        free(ids);
        return fail("%s", ct_last_error());
    }
    long len;
    char *s = ct_tokenizer_decode(tok, ids, n, &len);
    int rc = 0;
    if (!s) rc = fail("%s", ct_last_error());
    else if (fwrite(s, 1, (size_t)len, stdout) != (size_t)len) rc = fail("%s", "write to stdout failed");
    free(s);
    free(ids);
    ct_tokenizer_free(tok);
    return rc;
}

int ct_cmd_tokenizer(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[0], "encode")) return cmd_encode(argc - 1, argv + 1);
    if (!strcmp(argv[0], "decode")) return cmd_decode(argc - 1, argv + 1);
    if (!strcmp(argv[0], "info")) return cmd_info(argc - 1, argv + 1);
    fprintf(stderr, "ctitan tokenizer: unknown subcommand '%s' (train, encode, decode, info)\n", argv[0]);
    return 2;
}

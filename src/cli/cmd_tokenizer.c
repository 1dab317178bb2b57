// `ctitan tokenizer train | encode | decode`: the tokenizer library from the command line.
//   train  --input FILE|DIR... --vocab-size N --out FILE
//   encode --tokenizer FILE (--text "..." | --input FILE) [--bos] [--eos]   -> ids on one line
//   decode --tokenizer FILE --ids "1 2 3"                                 -> the bytes, as is
// Errors are one line on stderr and a non-zero exit.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "core/file_check.h"
#include "data/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctitan tokenizer train  --input FILE|DIR... --vocab-size N --out FILE\n"
            "       ctitan tokenizer encode --tokenizer FILE (--text TEXT | --input FILE) [--bos] [--eos]\n"
            "       ctitan tokenizer decode --tokenizer FILE --ids \"ID ID ...\"\n"
            "train: byte-level BPE; N counts the 2 special tokens (<|begin_of_text|>, <|end_of_text|>).\n"
            "A DIR input means its regular files (sorted, not recursive). The output is a tiktoken\n"
            "rank file (\"base64 rank\" per line). encode prints ids separated by spaces; decode\n"
            "writes the bytes exactly (no newline added).\n");
}

static int fail(const char *fmt, const char *arg) {
    fprintf(stderr, "ctitan tokenizer: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 1;
}

static int parse_long(const char *s, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

static int cmd_train(int argc, char **argv) {
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    int n_inputs = 0;
    long vocab = 0;
    int vocab_given = 0;  // (a value of its own: -5 once read as "no --vocab-size")
    const char *out = NULL;
    int rc = 2;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--input")) {
            // Every following argument up to the next option is an input.
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) inputs[n_inputs++] = argv[++i];
        } else if (!strcmp(argv[i], "--vocab-size") && i + 1 < argc) {
            if (parse_long(argv[++i], &vocab)) {
                rc = fail("--vocab-size: '%s' is not an integer", argv[i]);
                goto done;
            }
            // The range here, so the message names this value (99999999999 once got "must be
            // at least 258"): 256 byte ranks + 2 specials at least, ids that fit an int32.
            if (vocab < 258 || vocab > INT32_MAX) {
                fprintf(stderr, "ctitan tokenizer train: --vocab-size %s is outside [258, %d] (256 bytes + 2 special "
                                "tokens at least, ids that fit int32)\n", argv[i], INT32_MAX);
                rc = 2;
                goto done;
            }
            vocab_given = 1;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else {
            fprintf(stderr, "ctitan tokenizer train: unknown or incomplete option '%s'\n", argv[i]);
            goto done;
        }
    }
    if (!n_inputs || !vocab_given || !out) {
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
    free(inputs);
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

static int cmd_encode(int argc, char **argv) {
    const char *tok_path = NULL, *text = NULL, *input = NULL;
    int bos = 0, eos = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc) text = argv[++i];
        else if (!strcmp(argv[i], "--input") && i + 1 < argc) input = argv[++i];
        else if (!strcmp(argv[i], "--bos")) bos = 1;
        else if (!strcmp(argv[i], "--eos")) eos = 1;
        else {
            fprintf(stderr, "ctitan tokenizer encode: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!tok_path || !!text == !!input) {
        fprintf(stderr, "ctitan tokenizer encode: needs --tokenizer and one of --text, --input\n");
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
    int32_t *ids = NULL;
    long n = 0, cap = 0;
    int rc = 0;
    if (ct_tokenizer_encode_doc(tok, text ? text : buf, len, bos, eos, &ids, &n, &cap) < 0) {
        rc = fail("%s", ct_last_error());
    } else {
        for (long i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    free(ids);
    free(buf);
    ct_tokenizer_free(tok);
    return rc;
}

static int cmd_decode(int argc, char **argv) {
    const char *tok_path = NULL, *id_text = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc) id_text = argv[++i];
        else {
            fprintf(stderr, "ctitan tokenizer decode: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
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
    fprintf(stderr, "ctitan tokenizer: unknown subcommand '%s' (train, encode, decode)\n", argv[0]);
    return 2;
}

// Tokenizer speed on the fortunes corpus (/usr/share/games/fortunes, text files only):
// BPE training time for a 2048-token vocabulary and single-thread encode throughput in MB/s,
// against the 10 MB/s target. Usage: bench_tokenizer [DIR] [VOCAB]
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "data/tokenizer.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/usr/share/games/fortunes";
    long vocab = argc > 2 ? atol(argv[2]) : 2048;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "bench_tokenizer: cannot open %s (install fortunes)\n", dir);
        return 1;
    }
    char *paths[512];
    int np = 0;
    struct dirent *e;
    while ((e = readdir(d)) && np < 512) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' || (l > 4 && !strcmp(e->d_name + l - 4, ".dat")) ||
            (l > 3 && !strcmp(e->d_name + l - 3, ".u8")))
            continue;
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(full, &st) || !S_ISREG(st.st_mode)) continue;
        paths[np++] = strdup(full);
    }
    closedir(d);
    qsort(paths, (size_t)np, sizeof *paths, cmp_str);
    // Load every file into memory so encode timing excludes I/O.
    char **texts = malloc((size_t)np * sizeof *texts);
    long *lens = malloc((size_t)np * sizeof *lens), total = 0;
    for (int i = 0; i < np; i++) {
        FILE *f = fopen(paths[i], "rb");
        fseek(f, 0, SEEK_END);
        lens[i] = ftell(f);
        fseek(f, 0, SEEK_SET);
        texts[i] = malloc((size_t)lens[i] + 1);
        if (fread(texts[i], 1, (size_t)lens[i], f) != (size_t)lens[i]) return fprintf(stderr, "read error\n"), 1;
        fclose(f);
        total += lens[i];
    }
    printf("corpus: %d files, %.2f MB from %s\n", np, (double)total / 1e6, dir);

    char out[] = "/tmp/ct_bench_tok_XXXXXX";
    int fd = mkstemp(out);
    if (fd < 0) return 1;
    double t0 = now();
    if (ct_tokenizer_train((const char *const *)paths, np, vocab, out) != CT_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", ct_last_error());
        return 1;
    }
    double train_s = now() - t0;
    printf("train: vocab %ld (%ld merges) in %.3f s (from files, incl. reading + pre-tokenising)\n", vocab,
           vocab - 2 - 256, train_s);
    ct_tokenizer *tok = ct_tokenizer_load(out);
    remove(out);
    if (!tok) {
        fprintf(stderr, "bench_tokenizer: %s\n", ct_last_error());
        return 1;
    }
    int32_t *ids = NULL;
    long cap = 0, n = 0;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        n = 0;
        t0 = now();
        for (int i = 0; i < np; i++)
            if (ct_tokenizer_encode(tok, texts[i], lens[i], &ids, &n, &cap) < 0) return fprintf(stderr, "encode\n"), 1;
        double s = now() - t0;
        if (s < best) best = s;
    }
    double mbs = (double)total / 1e6 / best;
    printf("encode: %ld tokens (%.2f bytes/token), best of 5: %.3f s = %.1f MB/s on one thread; target 10 MB/s, "
           "ratio %.2f\n",
           n, (double)total / (double)n, best, mbs, mbs / 10.0);
    // Decode check on the last run, so the figure is for a correct encoder.
    long dl = 0, off = 0;
    char *dec = ct_tokenizer_decode(tok, ids, n, &dl);
    int ok = dec && dl == total;
    for (int i = 0; ok && i < np; off += lens[i], i++) ok = !memcmp(dec + off, texts[i], (size_t)lens[i]);
    printf("decode(encode(corpus)) == corpus: %s\n", ok ? "yes" : "NO");
    free(dec);
    free(ids);
    ct_tokenizer_free(tok);
    for (int i = 0; i < np; i++) free(texts[i]), free(paths[i]);
    free(texts);
    free(lens);
    return ok ? 0 : 1;
}

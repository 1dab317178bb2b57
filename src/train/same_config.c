// Every rank of a job reads its own command line and config file, and on several hosts those can
// differ. A different step count hangs a job at its end, a different model size fails deep inside
// a collective, a different learning rate or seed trains silently wrong. So at start-up every
// rank compares its effective configuration (as config.toml would hold it) with rank 0's.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static char *config_text(const ct_config *cfg, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f) return NULL;
    ct_config_write_toml(cfg, f);
    fclose(f);
    return text;
}

// The value of a "key = value  # comment" line of n bytes: its start, and its length in *len.
static const char *value_of(const char *line, size_t n, int *len) {
    const char *eq = memchr(line, '=', n);
    const char *v = eq ? eq + 1 : line;
    while (v < line + n && *v == ' ') v++;
    size_t left = (size_t)(line + n - v);
    for (size_t i = 0; i + 3 < left; i++)
        if (!memcmp(v + i, "  # ", 4)) left = i;
    *len = (int)left;
    return v;
}

// The first line where two TOML texts differ, named by its [section] and key.
static void first_difference(const char *mine, const char *theirs, char *out, size_t n) {
    char section[128] = "";
    while (*mine || *theirs) {
        size_t a = strcspn(mine, "\n"), b = strcspn(theirs, "\n");
        if (a == b && !strncmp(mine, theirs, a)) {
            if (mine[0] == '[') snprintf(section, sizeof section, "%.*s.", (int)(a > 2 ? a - 2 : 0), mine + 1);
        } else {
            int key = (int)strcspn(mine, " =\n"), la, lb;
            const char *va = value_of(mine, a, &la), *vb = value_of(theirs, b, &lb);
            snprintf(out, n, "%s%.*s = %.*s here, %.*s on rank 0", section, key, mine, la, va, lb, vb);
            return;
        }
        mine += a + (mine[a] == '\n');
        theirs += b + (theirs[b] == '\n');
    }
    snprintf(out, n, "(no line differs)");
}

ct_status ct_trainer_check_same_config(ct_group *world, const ct_config *cfg) {
    size_t len = 0;
    char *mine = config_text(cfg, &len);
    if (!mine) return ct_comm_agree(world, ct_set_error("cannot format the configuration"));
    int64_t hash[2] = {(int64_t)fnv1a(mine, len), (int64_t)len};  // this rank's; then rank 0's
    int64_t ref[2] = {hash[0], hash[1]};
    ct_comm_broadcast(world, ref, 2, CT_I64, 0);
    int32_t differs = hash[0] != ref[0] || hash[1] != ref[1];
    ct_comm_all_reduce(world, &differs, &differs, 1, CT_I32, CT_COMM_MAX);
    ct_status st = CT_OK;
    if (differs) {
        // Rank 0's text to everyone, so each rank that differs can name the first setting.
        char *theirs = malloc((size_t)ref[1] + 1);
        if (!theirs) abort();
        if (world->rank == 0) memcpy(theirs, mine, len);
        ct_comm_broadcast(world, theirs, (size_t)ref[1], CT_U8, 0);
        theirs[ref[1]] = 0;
        if (hash[0] != ref[0] || hash[1] != ref[1]) {
            char where[512];
            first_difference(mine, theirs, where, sizeof where);
            st = ct_set_error("the configuration differs from rank 0's: %s", where);
        }
        free(theirs);
    }
    free(mine);
    return ct_comm_agree(world, st);
}

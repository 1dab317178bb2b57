#include "core/strlist.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void ct_strlist_push(ct_strlist *l, const char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, sizeof(char *) * (size_t)l->cap);
        if (!v) ct_fatal("strlist", "out of memory for %d strings", l->cap);
        l->v = v;
    }
    l->v[l->n++] = ct_xstrdup(s);
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// (qsort and bsearch are not given the NULL array of an empty list: undefined behaviour.)
void ct_strlist_sort(ct_strlist *l) {
    if (l->n > 1) qsort(l->v, (size_t)l->n, sizeof(char *), cmp);
}

bool ct_strlist_has_sorted(const ct_strlist *l, const char *s) {
    return l->n > 0 && bsearch(&s, l->v, (size_t)l->n, sizeof(char *), cmp) != NULL;
}

void ct_strlist_free(ct_strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

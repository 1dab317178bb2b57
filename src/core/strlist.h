// A growing list of strings, each a copy the list owns: folder listings and input lists. Out of
// memory ends the job (ct_fatal), as every other set-up allocation does.
#ifndef CT_CORE_STRLIST_H
#define CT_CORE_STRLIST_H
#include <stdbool.h>

typedef struct {
    char **v;  // (n) the strings; NULL while empty
    int n, cap;
} ct_strlist;

void ct_strlist_push(ct_strlist *l, const char *s);  // appends a copy of s
void ct_strlist_sort(ct_strlist *l);                 // byte order (strcmp)
// Whether s is in l, which ct_strlist_sort has sorted.
bool ct_strlist_has_sorted(const ct_strlist *l, const char *s);
void ct_strlist_free(ct_strlist *l);  // the strings and the array; l is empty again
#endif

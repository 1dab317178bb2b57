// Tokenizer construction and persistence: telling a tokenizer.json (tokenizer_json.c) from a
// tiktoken rank file, reading and validating rank files, the special tokens, and writing rank
// files back (what training produces).
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_check.h"
#include "data/tokenizer_internal.h"

static char *read_file(const char *path, long *len) {
    char *buf;
    size_t n;
    if (ct_file_read_all(path, "tokenizer file", CT_FILE_TOKENIZER_MAX, &buf, &n) != CT_OK) return NULL;
    *len = (long)n;
    return buf;
}

static int build_table(ct_tokenizer *t);

ct_tokenizer *ct_tokenizer_from_vocab(ct_vocab *v, const ct_special *special, int n_special) {
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (ct_vocab_find(v, &c, 1) < 0) {
            ct_set_error("tokenizer: no rank for the single byte 0x%02x (byte-level BPE needs all 256)", b);
            ct_vocab_free(v);
            return NULL;
        }
    }
    ct_tokenizer *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->vocab = *v;
    memset(v, 0, sizeof *v);
    t->pre = ct_pretok_new();
    if (!t->pre) {
        ct_tokenizer_free(t);
        return NULL;
    }
    // The given specials, then bos/eos at the first free ids after the ranks if not given.
    t->special = calloc((size_t)n_special + 2, sizeof *t->special);
    if (!t->special) goto oom_t;
    t->bos = t->eos = -1;
    long next_id = t->vocab.n;
    for (int i = 0; i < n_special; i++) {
        ct_special *s = &t->special[t->n_special++];
        s->text = malloc((size_t)special[i].len + 1);
        if (!s->text) goto oom_t;
        memcpy(s->text, special[i].text, (size_t)special[i].len);
        s->text[special[i].len] = 0;
        s->len = special[i].len;
        s->id = special[i].id;
        s->special = 1;
        if (!strcmp(s->text, CT_TOKENIZER_BOS_TEXT)) t->bos = s->id;
        if (!strcmp(s->text, CT_TOKENIZER_EOS_TEXT)) t->eos = s->id;
        if (s->id >= next_id) next_id = s->id + 1L;
    }
    // Llama 3: 128000 ranks, then <|begin_of_text|> = 128000, <|end_of_text|> = 128001.
    long free_id = t->vocab.n;
    const char *texts[2] = {CT_TOKENIZER_BOS_TEXT, CT_TOKENIZER_EOS_TEXT};
    int32_t *ids[2] = {&t->bos, &t->eos};
    for (int k = 0; k < 2; k++) {
        if (*ids[k] >= 0) continue;
        for (int taken = 1; taken;) {  // skip ids that "#special" lines already used
            taken = 0;
            for (int i = 0; i < t->n_special; i++)
                if (t->special[i].id == free_id) taken = 1;
            if (taken) free_id++;
        }
        ct_special *s = &t->special[t->n_special++];
        s->text = strdup(texts[k]);
        if (!s->text) goto oom_t;
        s->len = (long)strlen(texts[k]);
        s->id = (int32_t)free_id++;
        s->special = 1;
        *ids[k] = s->id;
        if (s->id >= next_id) next_id = s->id + 1L;
    }
    t->vocab_size = next_id;
    t->n_ranks = t->vocab.n;
    t->ignore_merges = 1;  // tiktoken looks a whole piece up before merging
    // One pre-tokenisation step: the split by CT_TOKENIZER_PATTERN.
    t->steps = calloc(1, sizeof *t->steps);
    if (!t->steps) goto oom_t;
    t->n_steps = 1;
    t->steps[0] = (ct_pre_step){CT_STEP_REGEX, strdup(CT_TOKENIZER_PATTERN), t->pre};
    t->pre = NULL;  // owned by the step now
    if (!t->steps[0].pattern || build_table(t) || ct_tokenizer_index_added(t)) goto oom_t;
    return t;
oom_t:
    ct_tokenizer_free(t);
    ct_set_error("tokenizer: out of memory");
    return NULL;
oom:
    ct_vocab_free(v);
    ct_set_error("tokenizer: out of memory");
    return NULL;
}

// The id table of a rank-file tokenizer: ranks from the vocab, then the specials.
static int build_table(ct_tokenizer *t) {
    long nb = t->vocab.nbytes + t->vocab_size;  // + a NUL after each
    for (int i = 0; i < t->n_special; i++) nb += t->special[i].len;
    t->tbytes = calloc((size_t)nb + 1, 1);
    t->toff = calloc((size_t)t->vocab_size + 1, sizeof *t->toff);
    t->tkind = calloc((size_t)t->vocab_size, 1);
    if (!t->tbytes || !t->toff || !t->tkind) return -1;
    // Lengths first (specials may come in any id order), then offsets, then bytes.
    for (long id = 0; id < t->vocab_size; id++) t->toff[id + 1] = 1;
    for (long id = 0; id < t->vocab.n; id++) t->toff[id + 1] += t->vocab.off[id + 1] - t->vocab.off[id];
    for (int i = 0; i < t->n_special; i++) t->toff[t->special[i].id + 1] += t->special[i].len;
    for (long id = 0; id < t->vocab_size; id++) t->toff[id + 1] += t->toff[id];
    for (long id = 0; id < t->vocab.n; id++) {
        long len;
        const uint8_t *b = ct_vocab_get(&t->vocab, (int32_t)id, &len);
        memcpy(t->tbytes + t->toff[id], b, (size_t)len);
    }
    memset(t->tkind, CT_ID_TOKEN, (size_t)t->vocab.n);
    for (int i = 0; i < t->n_special; i++) {
        memcpy(t->tbytes + t->toff[t->special[i].id], t->special[i].text, (size_t)t->special[i].len);
        t->tkind[t->special[i].id] = CT_ID_SPECIAL;
    }
    return 0;
}

int ct_tokenizer_index_added(ct_tokenizer *t) {
    for (int set = 0; set < 2; set++) {
        int32_t *off = calloc(257, sizeof *off), *idx = malloc(((size_t)t->n_special + 1) * sizeof *idx);
        if (!off || !idx) {
            free(off), free(idx);
            return -1;
        }
        t->match_off[set] = off, t->match_idx[set] = idx;
        // Counting sort of the set's tokens by first byte (file order within one byte).
        for (int i = 0; i < t->n_special; i++) {
            const ct_special *a = &t->special[i];
            if (a->normalized != set) continue;
            off[(uint8_t)(set && a->norm ? a->norm[0] : a->text[0]) + 1]++;
            t->match_n[set]++;
            t->match_special_n[set] += a->special;
        }
        for (int b = 0; b < 256; b++) off[b + 1] += off[b];
        int32_t fill[256];
        memcpy(fill, off, sizeof fill);
        for (int i = 0; i < t->n_special; i++) {
            const ct_special *a = &t->special[i];
            if (a->normalized == set) idx[fill[(uint8_t)(set && a->norm ? a->norm[0] : a->text[0])]++] = i;
        }
    }
    return 0;
}

void ct_tokenizer_free(ct_tokenizer *tok) {
    if (!tok) return;
    ct_vocab_free(&tok->vocab);
    free(tok->vocab_id);
    ct_merges_free(&tok->merges);
    free(tok->tbytes);
    free(tok->toff);
    free(tok->tkind);
    for (int i = 0; i < tok->n_special; i++) free(tok->special[i].text), free(tok->special[i].norm);
    free(tok->special);
    for (int s = 0; s < 2; s++) free(tok->match_off[s]), free(tok->match_idx[s]);
    for (int i = 0; i < tok->n_steps; i++) free(tok->steps[i].pattern), ct_pretok_free(tok->steps[i].re);
    free(tok->steps);
    ct_pretok_free(tok->pre);
    free(tok->path);
    free(tok->config_path);
    free(tok);
}

long ct_tokenizer_vocab_size(const ct_tokenizer *tok) { return tok->vocab_size; }
int32_t ct_tokenizer_bos(const ct_tokenizer *tok) { return tok->bos; }
int32_t ct_tokenizer_eos(const ct_tokenizer *tok) { return tok->eos; }
long ct_tokenizer_n_ranks(const ct_tokenizer *tok) { return tok->n_ranks; }
int ct_tokenizer_add_bos(const ct_tokenizer *tok) { return tok->add_bos; }
int ct_tokenizer_is_json(const ct_tokenizer *tok) { return tok->kind == CT_TOK_MERGES; }
const char *ct_tokenizer_json_path(const ct_tokenizer *tok) { return tok->kind == CT_TOK_MERGES ? tok->path : NULL; }
const char *ct_tokenizer_config_path(const ct_tokenizer *tok) { return tok->config_path; }

// Parses a non-negative decimal that fits int32; returns -1 otherwise.
static long parse_id(const char *s, long n) {
    if (n <= 0 || n > 10) return -1;
    long v = 0;
    for (long i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v <= INT32_MAX - 1 ? v : -1;
}

typedef struct {
    long rank;
    long line;
    long tok_off, tok_len;  // bytes in the scratch buffer
} rank_line;

// A tokenizer.json is a JSON object: its first byte that is not white space is '{'. No rank-file
// line starts with one (base64 has no '{'; comments start with '#').
static int is_json(const char *text, long len) {
    long i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) i++;
    return i < len && text[i] == '{';
}

ct_tokenizer *ct_tokenizer_load(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        // A folder: its tokenizer.json (a Hugging Face model folder).
        char json[4096];
        snprintf(json, sizeof json, "%s/tokenizer.json", path);
        if (access(json, F_OK) != 0) {
            ct_set_error("%s: a folder without a tokenizer.json: give the tokenizer.json, the folder holding one, or "
                         "a tiktoken rank file",
                         path);
            return NULL;
        }
        return ct_tokenizer_load_json(json);
    }
    long len;
    char *text = read_file(path, &len);
    if (!text) return NULL;
    if (is_json(text, len)) {
        free(text);
        return ct_tokenizer_load_json(path);
    }
    rank_line *rows = NULL;
    uint8_t *tokbytes = NULL;
    ct_special *special = NULL;
    long n_rows = 0, rows_cap = 0, tb_len = 0, n_special = 0, lineno = 0;
    ct_vocab v;
    ct_vocab_init(&v);
    // Token bytes decode to at most 3/4 of the file.
    tokbytes = malloc((size_t)len + 4);
    if (!tokbytes) goto oom;

    for (char *p = text, *end = text + len; p < end;) {
        char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        char *line = p, *le = eol;
        p = eol + 1;
        lineno++;
        if (le > line && le[-1] == '\r') le--;
        if (le == line) continue;
        if (*line == '#') {
            // "#special TEXT ID"; any other '#' line is a comment.
            if (le - line < 9 || strncmp(line, "#special ", 9)) continue;
            char *sp = le;
            while (sp > line + 9 && sp[-1] != ' ') sp--;
            long id = parse_id(sp, le - sp);
            if (sp <= line + 10 || id < 0) {
                ct_set_error("%s:%ld: expected \"#special TEXT ID\"", path, lineno);
                goto fail;
            }
            // The text is kept as a C string (compared with strcmp, written back with %s): a NUL
            // inside it would cut it short there, so the file saved would name another token.
            if (memchr(line + 9, 0, (size_t)(sp - 1 - (line + 9)))) {
                ct_set_error("%s:%ld: special token text holds a NUL byte", path, lineno);
                goto fail;
            }
            ct_special *s2 = realloc(special, (size_t)(n_special + 1) * sizeof *special);
            if (!s2) goto oom;
            special = s2;
            special[n_special++] = (ct_special){.text = line + 9, .len = sp - 1 - (line + 9), .id = (int32_t)id};
            // Kept pointing into `text`; copied by ct_tokenizer_from_vocab.
            continue;
        }
        char *sp = memchr(line, ' ', (size_t)(le - line));
        if (!sp) {
            ct_set_error("%s:%ld: expected \"BASE64 RANK\"", path, lineno);
            goto fail;
        }
        long rank = parse_id(sp + 1, le - sp - 1);
        if (rank < 0) {
            ct_set_error("%s:%ld: bad rank '%.*s'", path, lineno, (int)(le - sp - 1 > 40 ? 40 : le - sp - 1), sp + 1);
            goto fail;
        }
        long nb = ct_base64_decode(line, sp - line, tokbytes + tb_len);
        if (nb <= 0) {
            ct_set_error("%s:%ld: bad base64 '%.*s'", path, lineno, (int)(sp - line > 40 ? 40 : sp - line), line);
            goto fail;
        }
        if (n_rows == rows_cap) {
            rows_cap = rows_cap ? 2 * rows_cap : 4096;
            rank_line *r2 = realloc(rows, (size_t)rows_cap * sizeof *rows);
            if (!r2) goto oom;
            rows = r2;
        }
        rows[n_rows++] = (rank_line){rank, lineno, tb_len, nb};
        tb_len += nb;
    }
    // Ranks must be exactly 0..n-1: place each row at its rank, then look for holes.
    long *at = malloc((size_t)(n_rows ? n_rows : 1) * sizeof *at);  // (n_rows) row index of each rank
    if (!at) goto oom;
    for (long r = 0; r < n_rows; r++) at[r] = -1;
    for (long i = 0; i < n_rows; i++) {
        long r = rows[i].rank;
        if (r < n_rows && at[r] >= 0) {
            ct_set_error("%s:%ld: duplicate rank %ld (also on line %ld)", path, rows[i].line, r, rows[at[r]].line);
            free(at);
            goto fail;
        }
        if (r < n_rows) at[r] = i;
    }
    for (long i = 0; i < n_rows; i++) {
        if (rows[i].rank < n_rows) continue;
        // With no duplicates, a rank >= n means some rank below n is missing.
        long missing = 0;
        while (at[missing] >= 0) missing++;
        ct_set_error("%s:%ld: rank %ld leaves a gap: the file has %ld ranks but rank %ld is missing", path,
                     rows[i].line, rows[i].rank, n_rows, missing);
        free(at);
        goto fail;
    }
    for (long r = 0; r < n_rows; r++) {
        const rank_line *row = &rows[at[r]];
        int added;
        int32_t id = ct_vocab_intern(&v, tokbytes + row->tok_off, row->tok_len, &added);
        if (id < 0) {
            free(at);
            goto oom;
        }
        if (!added) {
            ct_set_error("%s:%ld: token bytes duplicate those of rank %d (line %ld)", path, row->line, id,
                         rows[at[id]].line);
            free(at);
            goto fail;
        }
    }
    free(at);
    for (long i = 0; i < n_special; i++) {
        if (special[i].id < n_rows) {
            ct_set_error("%s: special token '%.*s' has id %d, which is an ordinary rank (ranks end at %ld)", path,
                         (int)special[i].len, special[i].text, special[i].id, n_rows - 1);
            goto fail;
        }
        for (long k = 0; k < i; k++)
            if (special[k].id == special[i].id ||
                (special[k].len == special[i].len && !memcmp(special[k].text, special[i].text, (size_t)special[k].len))) {
                ct_set_error("%s: special token '%.*s' (id %d) repeats a text or id", path, (int)special[i].len,
                             special[i].text, special[i].id);
                goto fail;
            }
    }
    ct_tokenizer *t = ct_tokenizer_from_vocab(&v, special, (int)n_special);
    if (!t) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ct_last_error());
        ct_set_error("%s: %s", path, msg);
    }
    free(text);
    free(rows);
    free(tokbytes);
    free(special);
    return t;
oom:
    ct_set_error("%s: out of memory", path);
fail:
    ct_vocab_free(&v);
    free(text);
    free(rows);
    free(tokbytes);
    free(special);
    return NULL;
}

ct_status ct_tokenizer_save(const ct_tokenizer *tok, const char *path) {
    if (tok->kind != CT_TOK_RANKS)
        return ct_set_error("%s: a tokenizer.json tokenizer has no rank-file form (its merges are its own)", path);
    FILE *f = ct_file_fopen_write(path, "tokenizer file", CT_FILE_WRITE_TRUNC);
    if (!f) return CT_ERR;
    char *b64 = NULL;
    long b64_cap = 0;
    for (int32_t r = 0; r < tok->vocab.n; r++) {
        long len;
        const uint8_t *s = ct_vocab_get(&tok->vocab, r, &len);
        long need = ct_base64_encoded_len(len) + 1;
        if (need > b64_cap) {
            free(b64);
            b64 = malloc((size_t)(b64_cap = 2 * need));
            if (!b64) break;
        }
        ct_base64_encode(s, len, b64);
        fprintf(f, "%s %d\n", b64, r);
    }
    // Specials at their default ids (bos, eos right after the ranks) need no line.
    for (int i = 0; i < tok->n_special; i++) {
        const ct_special *s = &tok->special[i];
        int dflt = (s->id == tok->bos && s->id == tok->vocab.n) || (s->id == tok->eos && s->id == tok->vocab.n + 1);
        if (!dflt) fprintf(f, "#special %s %d\n", s->text, s->id);
    }
    int bad = !b64 && tok->vocab.n > 0;
    free(b64);
    if (ferror(f)) bad = 1;
    if (fclose(f)) bad = 1;
    return bad ? ct_set_error_at(CT_E_IO, path, "%s: write failed", path) : CT_OK;
}

// Byte-level BPE -> Hugging Face tokenizer files (format in hf_tokenizer.h).
#include "checkpoint/hf_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/hf_internal.h"
#include "core/file_check.h"
#include "core/fs.h"
#include "core/json.h"

// ---- GPT-2's byte-to-unicode map ------------------------------------------------------------
// Printable bytes stand for themselves; the other 68 (controls, space, 0x7f-0xa0, 0xad) get
// the code points 256, 257, ... in byte order, so every byte string is printable text.
static void byte_map(unsigned cp[256]) {
    unsigned next = 256;
    for (unsigned b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        cp[b] = printable ? b : next++;
    }
}

// Writes the byte-level spelling of s[0..len), escaped for a JSON string (without the quotes).
static void write_spelling(FILE *f, const unsigned cp[256], const char *s, long len) {
    for (long i = 0; i < len; i++) {
        unsigned c = cp[(unsigned char)s[i]];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", (char)c);
        else if (c < 0x80) fputc((int)c, f);
        else fputc((int)(0xc0 | (c >> 6)), f), fputc((int)(0x80 | (c & 0x3f)), f);  // the map stays below 0x800
    }
}

// ---- token lookup by bytes -------------------------------------------------------------------

typedef struct {
    const ct_hf_vocab *v;
    int32_t *slot;  // (cap) token id or -1; open addressing, linear probing
    size_t cap;
} lookup;

static uint64_t hash_bytes(const char *s, long n) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (long i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int32_t find(const lookup *L, const char *s, long n) {
    for (size_t k = hash_bytes(s, n) & (L->cap - 1);; k = (k + 1) & (L->cap - 1)) {
        int32_t id = L->slot[k];
        if (id < 0) return -1;
        if (L->v->token_len[id] == n && !memcmp(L->v->token[id], s, (size_t)n)) return id;
    }
}

static void lookup_build(lookup *L, const ct_hf_vocab *v) {
    L->v = v;
    L->cap = 16;
    while (L->cap < 2 * (size_t)v->n_tokens) L->cap *= 2;
    L->slot = ct_xmalloc(L->cap * sizeof(int32_t));
    memset(L->slot, 0xff, L->cap * sizeof(int32_t));
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (find(L, v->token[id], v->token_len[id]) >= 0) continue;  // a repeat: the lower rank wins
        size_t k = hash_bytes(v->token[id], v->token_len[id]) & (L->cap - 1);
        while (L->slot[k] >= 0) k = (k + 1) & (L->cap - 1);
        L->slot[k] = id;
    }
}

// ---- tokenizer.json ---------------------------------------------------------------------------

typedef struct {
    int32_t left, right;
} merge;

static int cmp_merge(const void *a, const void *b) {
    const merge *x = a, *y = b;
    return x->left != y->left ? (x->left > y->left) - (x->left < y->left) : (x->right > y->right) - (x->right < y->right);
}

// The merges of token `id`: every split into two tokens, ordered by (left rank, right rank).
// Returns their count; m has room for token_len - 1.
static int merges_of(const lookup *L, int32_t id, merge *m) {
    const char *s = L->v->token[id];
    long len = L->v->token_len[id];
    int n = 0;
    for (long k = 1; k < len; k++) {
        int32_t a = find(L, s, k), b = find(L, s + k, len - k);
        if (a >= 0 && b >= 0) m[n++] = (merge){a, b};
    }
    qsort(m, (size_t)n, sizeof *m, cmp_merge);
    return n;
}

// By id: tokenizers numbers the added tokens that are not in the vocabulary in file order, from
// the vocabulary's size on, whatever ids the file gives them.
static void write_added_tokens(FILE *f, const ct_hf_vocab *v) {
    fputs("  \"added_tokens\": [", f);
    int32_t last = -1;
    for (int k = 0; k < v->n_special; k++) {
        int i = -1;  // the special with the smallest id above the last one written
        for (int j = 0; j < v->n_special; j++)
            if (v->special_id[j] > last && (i < 0 || v->special_id[j] < v->special_id[i])) i = j;
        if (i < 0) break;
        last = v->special_id[i];
        fprintf(f, "%s\n    {\"id\": %d, \"content\": ", k ? "," : "", (int)v->special_id[i]);
        ct_json_write_string(f, v->special[i], strlen(v->special[i]));
        fputs(", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
              "\"special\": true}",
              f);
    }
    fputs(v->n_special ? "\n  ],\n" : "],\n", f);
}

static void write_pipeline(FILE *f, const ct_hf_vocab *v) {
    fputs("  \"normalizer\": null,\n"
          "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
          "    {\"type\": \"Split\", \"pattern\": {\"Regex\": ",
          f);
    ct_json_write_string(f, v->pattern, strlen(v->pattern));
    fputs("}, \"behavior\": \"Isolated\", \"invert\": false},\n"
          "    {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]},\n"
          "  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, "
          "\"use_regex\": true},\n"
          "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
          "\"use_regex\": true},\n",
          f);
}

static void write_model(FILE *f, const ct_hf_vocab *v, const lookup *L, const unsigned cp[256]) {
    fputs("  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null,\n"
          "    \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": true,\n"
          "    \"vocab\": {",
          f);
    for (int32_t id = 0; id < v->n_tokens; id++) {
        fputs(id ? ",\n      \"" : "\n      \"", f);
        write_spelling(f, cp, v->token[id], v->token_len[id]);
        fprintf(f, "\": %d", (int)id);
    }
    fputs("},\n    \"merges\": [", f);
    long max_len = 1, n_merges = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) max_len = v->token_len[id] > max_len ? v->token_len[id] : max_len;
    merge *m = ct_xmalloc(sizeof(merge) * (size_t)max_len);
    // Ids are ranks, so walking them in order lists the merges by priority.
    for (int32_t id = 0; id < v->n_tokens; id++) {
        int n = merges_of(L, id, m);
        for (int k = 0; k < n; k++, n_merges++) {
            // "left right": a byte-level spelling never holds a space (0x20 is spelled U+0120).
            fputs(n_merges ? ",\n      \"" : "\n      \"", f);
            write_spelling(f, cp, v->token[m[k].left], v->token_len[m[k].left]);
            fputc(' ', f);
            write_spelling(f, cp, v->token[m[k].right], v->token_len[m[k].right]);
            fputc('"', f);
        }
    }
    free(m);
    fputs("]\n  }\n", f);
}

static ct_status write_tokenizer_json(const char *dir, const ct_hf_vocab *v, const lookup *L) {
    unsigned cp[256];
    byte_map(cp);
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    ct_fs_atomic out;
    FILE *f = ct_fs_atomic_open(&out, path, "tokenizer file", 0);
    if (!f) return CT_ERR;
    fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n", f);
    write_added_tokens(f, v);
    write_pipeline(f, v);
    write_model(f, v, L, cp);
    fputs("}\n", f);
    return ct_fs_atomic_commit(&out);
}

// The text of special token `id`, or NULL.
static const char *special_text(const ct_hf_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_special; i++)
        if (v->special_id[i] == id) return v->special[i];
    return NULL;
}

static ct_status write_tokenizer_config(const char *dir, const ct_hf_vocab *v) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    ct_fs_atomic out;
    FILE *f = ct_fs_atomic_open(&out, path, "tokenizer file", 0);
    if (!f) return CT_ERR;
    fputs("{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n", f);
    const char *names[2] = {"bos_token", "eos_token"};
    const int32_t ids[2] = {v->bos, v->eos};
    for (int k = 0; k < 2; k++) {
        const char *text = special_text(v, ids[k]);
        if (!text) continue;
        fprintf(f, "  \"%s\": ", names[k]);
        ct_json_write_string(f, text, strlen(text));
        fputs(",\n", f);
    }
    fputs("  \"add_bos_token\": false,\n  \"add_eos_token\": false,\n  \"clean_up_tokenization_spaces\": false\n}\n", f);
    return ct_fs_atomic_commit(&out);
}

// Copies src byte for byte to path (through path.tmp).
static ct_status copy_file(const char *src, const char *path, uint64_t max) {
    FILE *in = ct_file_fopen_read(src, "tokenizer file", max);
    if (!in) return CT_ERR;
    ct_fs_atomic copy;
    FILE *out = ct_fs_atomic_open(&copy, path, "tokenizer file", 0);
    if (!out) {
        fclose(in);
        return CT_ERR;
    }
    char chunk[65536];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, in)) > 0) fwrite(chunk, 1, k, out);
    int read_err = ferror(in);
    fclose(in);
    if (read_err) {
        ct_fs_atomic_abort(&copy);
        return ct_set_error_at(CT_E_IO, src, "%s: read failed", src);
    }
    return ct_fs_atomic_commit(&copy);
}

// Copies the rank file byte for byte to dir/original/tokenizer.model.
static ct_status copy_rank_file(const char *dir, const char *src) {
    char sub[1024], path[1100];
    snprintf(sub, sizeof sub, "%s/original", dir);
    if (ct_fs_make_dirs(sub)) return CT_ERR;
    snprintf(path, sizeof path, "%s/tokenizer.model", sub);
    return copy_file(src, path, CT_FILE_TOKENIZER_MAX);
}

ct_status ct_hf_write_tokenizer(const char *dir, const ct_hf_vocab *v) {
    if (ct_hf_check_dir(dir)) return CT_ERR;
    if (v->tokenizer_json) {
        char path[1100];
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        ct_status st = copy_file(v->tokenizer_json, path, CT_FILE_TOKENIZER_MAX);
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        if (st == CT_OK && v->tokenizer_config) st = copy_file(v->tokenizer_config, path, CT_FILE_TEXT_CONFIG_MAX);
        return st;
    }
    if (v->n_tokens < 256 || !v->pattern) return ct_set_error("%s: tokenizer: fewer than 256 tokens or no pattern", dir);
    lookup L;
    lookup_build(&L, v);
    ct_status st = CT_OK;
    for (int b = 0; b < 256 && st == CT_OK; b++) {
        char c = (char)b;
        if (find(&L, &c, 1) < 0) st = ct_set_error("%s: tokenizer has no token for byte 0x%02x (byte-level BPE needs all 256)", dir, b);
    }
    if (st == CT_OK) st = write_tokenizer_json(dir, v, &L);
    free(L.slot);
    if (st == CT_OK) st = write_tokenizer_config(dir, v);
    if (st == CT_OK && v->rank_file) st = copy_rank_file(dir, v->rank_file);
    return st;
}

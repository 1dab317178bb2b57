// `ctitan eval --model FILE --data DIR [--split val|train] [--seq_len T] [--batch B] [--steps N]`
// The mean next-token loss of a saved model on a token set, in one process: the loader reads
// windows in stream order (as validation does), ct_model_step runs forward only, and the loss is
// the sum over every target divided by their count — the number ct_trainer_validate reports for
// the same (T, B, steps). A model trained with block_causal attention (and document positions)
// is evaluated with them: documents from the data's EOS, as the trainer finds them. Defaults:
// T = the model's training length (256 when the file has none), B = 1, N = one pass over the
// split (every whole batch).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint/model_file.h"
#include "cli/commands.h"
#include "cli/model_device.h"
#include "cli/options.h"
#include "core/memory.h"
#include "data/documents.h"
#include "data/loader.h"
#include "model/weights.h"
#include "model/runner.h"

// The model and the data agree: the data's vocabulary fits the model's, and the tokenizer the
// model was trained with (its file records the training data's) is the one the data was made with.
// Where either side records none, `note` says the check cannot be made (printed once the run
// starts, so that a refusal stays one line).
static ct_status check_tokenizer(const char *model_path, const ct_model_config *m, const char *data, const char *split,
                                 const ct_loader *loader, char *note, size_t note_size) {
    note[0] = 0;
    uint32_t vocab = ct_loader_peek_vocab(data, split);
    if (vocab > (uint32_t)m->vocab_size)
        return ct_set_error("%s (%s split) was made with a vocabulary of %u ids, more than model %s's %d: evaluate on "
                            "data prepared with the model's tokenizer",
                            data, split, vocab, model_path, m->vocab_size);
    ct_model_tok mt;
    if (ct_model_read_tok(model_path, &mt)) return CT_ERR;
    ct_shard_tok dt = ct_loader_tokenizer(loader);
    if (mt.present && dt.present) {
        ct_shard_tok as_shard = {.present = 1, .bos = mt.bos, .eos = mt.eos};
        for (int i = 0; i < CT_SHARD_TOK_HASH_BYTES; i++) {
            unsigned v;
            sscanf(mt.hash + 2 * i, "%2x", &v);
            as_shard.hash[i] = (uint8_t)v;
        }
        if (!ct_shard_tok_same(&as_shard, &dt)) {
            char a[160], b[160];
            ct_shard_tok_describe(&as_shard, a, sizeof a);
            ct_shard_tok_describe(&dt, b, sizeof b);
            return ct_set_error("model %s was trained on data of %s, but %s (%s split) was made with %s: evaluate on data "
                                "prepared with the model's tokenizer",
                                model_path, a, data, split, b);
        }
    } else if (mt.present) {
        snprintf(note, note_size, "ctitan eval: note: %s records no tokenizer (shards from before shard version 2, or "
                                  "llm.c's): it cannot be checked against model %s's\n", data, model_path);
    } else if (dt.present) {
        snprintf(note, note_size, "ctitan eval: note: model %s records no tokenizer (saved before models recorded one, "
                                  "or converted): it cannot be checked against %s's\n", model_path, data);
    }
    return CT_OK;
}

int ct_cmd_eval(int argc, char **argv) {
    const char *model_path = NULL, *data = NULL, *split = "val", *device = NULL;
    long T = 0, B = 1, steps = 0;
    const ct_opt opts[] = {
        {"model", 0, CT_OPT_STR, &model_path, "PATH", "the saved model (.safetensors), or a checkpoint's step-N folder", 0, 0},
        {"data", 0, CT_OPT_STR, &data, "DIR|SHARD", "token shards (ctitan data prepare)", 0, 0},
        {"split", 0, CT_OPT_STR, &split, "val|train", "which split of DIR (val)", 0, 0},
        {"seq_len", 0, CT_OPT_LONG, &T, "T", "window length (the model's training length; 256 if unknown)", 1, 1 << 30},
        {"batch", 0, CT_OPT_LONG, &B, "B", "windows per forward pass (1)", 1, 1 << 30},
        {"steps", 0, CT_OPT_LONG, &steps, "N", "batches (one pass over the split)", 1, 1 << 30},
        {"device", 0, CT_OPT_STR, &device, "NAME", CT_CLI_DEVICE_HELP, 0, 0},
    };
    const ct_opt_spec spec = {"ctitan eval", "--model FILE --data DIR|SHARD [options]",
                              "Prints the mean next-token loss and perplexity. A --seq_len past the length the model\n"
                              "was trained at is run, with a warning.\n",
                              opts, (int)(sizeof opts / sizeof opts[0]), NULL, NULL};
    int prc = ct_opt_parse(&spec, argc, argv);
    if (prc) return prc == CT_OPT_HELP ? 0 : 2;
    if (strcmp(split, "val") && strcmp(split, "train")) {
        fprintf(stderr, "ctitan eval: --split: expected val or train, got '%s'\n", split);
        return 2;
    }
    if (!model_path || !data) {
        fprintf(stderr, "ctitan eval: needs --model and --data\n");
        return 2;
    }
    const ct_kernels *k = ct_cli_device("ctitan eval", device);
    if (!k) return 2;

    ct_model_config m;
    ct_param_table table;
    float *block;
    if (ct_model_load_all(model_path, &m, &table, &block)) {
        fprintf(stderr, "ctitan eval: %s\n", ct_last_error());
        return 1;
    }
    if (ct_model_check_finite(&table, block)) {  // its loss would be NaN: say why instead
        fprintf(stderr, "ctitan eval: %s: %s\n", model_path, ct_last_error());
        free(block);
        ct_param_table_free(&table);
        return 1;
    }
    // Positions past the trained length were never seen (RoPE angles, attention spans): the loss
    // there says little about the model, so it is computed, but not silently.
    if (T && m.max_seq_len > 0 && T > m.max_seq_len)
        fprintf(stderr, "ctitan eval: warning: --seq_len %ld exceeds the sequence length the model was trained at "
                        "(%d)\n", T, m.max_seq_len);
    if (!T) T = m.max_seq_len > 0 ? m.max_seq_len : 256;
    m.max_seq_len = (int)T;
    ct_loader_config lc = {
        .source = data,
        .split = split,
        .seq_len = (int)T,
        .global_batch = (int)B,
        .dp_rank = 0,
        .dp_size = 1,
        .seed = 0,
        .vocab_size = (uint32_t)m.vocab_size,
        .sequential = true,
    };
    char note[1200];
    ct_loader *loader = ct_loader_open(&lc);
    if (!loader || check_tokenizer(model_path, &m, data, split, loader, note, sizeof note)) {
        fprintf(stderr, "ctitan eval: %s\n", ct_last_error());
        ct_loader_free(loader);
        free(block);
        ct_param_table_free(&table);
        return 1;
    }
    // The model's mask needs the documents: the EOS id of the data's tokenizer (else the model's).
    int32_t eos = -1;
    if (m.block_causal) {
        ct_shard_tok dt = ct_loader_tokenizer(loader);
        ct_model_tok mt = {0};
        if (dt.present) eos = dt.eos;
        else if (ct_model_read_tok(model_path, &mt) == CT_OK && mt.present) eos = mt.eos;
        if (eos < 0) {
            fprintf(stderr, "ctitan eval: model %s was trained with model.attn_mask_type block_causal, but neither %s "
                            "nor the model records an EOS id to find documents by: evaluate on shards made by "
                            "ctitan data prepare with the model's tokenizer\n", model_path, data);
            ct_loader_free(loader);
            free(block);
            ct_param_table_free(&table);
            return 1;
        }
    }
    long windows = (long)ct_loader_num_windows(loader);
    if (!steps) steps = windows / B;
    int rc = 1;
    if (steps < 1) {
        fprintf(stderr, "ctitan eval: the %s split has %ld windows of %ld tokens, fewer than one batch of %ld\n", split,
                windows, T, B);
        goto done_loader;
    }

    if (steps * B > windows)  // allowed (validation does the same), but worth a word
        fprintf(stderr, "ctitan eval: note: %ld batches of %ld read the split's %ld windows more than once\n", steps, B,
                windows);

    ct_model_weights w;
    float *placed = ct_cli_weights_on(k, block, table.total);
    ct_model_weights_init(&w, &table, &m, placed);
    ct_model_acts acts;
    ct_model_acts_init_on(&acts, k, &m, B, T);
    size_t tok_bytes = (size_t)(B * T) * sizeof(int32_t);
    int32_t *inputs = ct_xmalloc(tok_bytes);   // (B, T) as read
    int32_t *targets = ct_xmalloc(tok_bytes);  // (B, T)
    int32_t *docs = ct_xmalloc(tok_bytes);     // (B, T) each token's document (block_causal)
    int32_t *rpos = ct_xmalloc(tok_bytes);     // (B, T) its position in it (document positions)
    // (4, B, T) on the device: inputs, targets, docs, rope positions
    int32_t *dev_tok = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_OTHER, 4 * tok_bytes);
    int32_t *dev_docs = m.block_causal ? dev_tok + 2 * B * T : NULL;
    int32_t *dev_rpos = m.document_positions ? dev_tok + 3 * B * T : NULL;
    struct timespec t0, t1;
    fputs(note, stderr);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double loss_sum = 0;
    long valid = 0;
    for (long s = 0; s < steps; s++) {
        ct_loader_next_batch(loader, inputs, targets);
        for (long j = 0; j < B * T; j++) valid += targets[j] >= 0;
        k->copy_from_host(dev_tok, inputs, tok_bytes);
        k->copy_from_host(dev_tok + B * T, targets, tok_bytes);
        if (dev_docs) {
            ct_documents_find(inputs, B, T, eos, docs);
            k->copy_from_host(dev_docs, docs, tok_bytes);
        }
        if (dev_rpos) {
            ct_documents_positions(docs, B, T, rpos);
            k->copy_from_host(dev_rpos, rpos, tok_bytes);
        }
        loss_sum += ct_model_step_docs(&acts, &w, NULL, dev_tok, dev_tok + B * T, dev_docs, dev_rpos, 0.0f);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    double loss = valid ? loss_sum / (double)valid : 0.0;
    if (!isfinite(loss)) {  // finite weights can still overflow (huge activations)
        fprintf(stderr, "ctitan eval: the loss is %s: the model's activations overflow\n", isnan(loss) ? "NaN" : "infinite");
        goto done_eval;
    }
    printf("eval: %s split of %s: %ld batches x %ld x %ld = %ld tokens (%ld windows in the split)\n", split, data,
           steps, B, T, valid, windows);
    if (m.block_causal)
        printf("attention: block_causal (documents end at EOS id %d), RoPE positions: %s\n", eos,
               m.document_positions ? "document" : "sequence");
    printf("loss %.6f perplexity %.3f (%.0f tokens/s)\n", loss, exp(loss), dt > 0 ? (double)valid / dt : 0.0);
    rc = 0;
done_eval:
    free(inputs);
    free(targets);
    free(docs);
    free(rpos);
    ct_mem_free(dev_tok);
    ct_model_acts_free(&acts);
    ct_model_weights_free(&w);
    ct_cli_weights_free(placed, block);
done_loader:
    ct_loader_free(loader);
    free(block);
    ct_param_table_free(&table);
    return rc;
}

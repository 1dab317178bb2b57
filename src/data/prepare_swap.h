// How `ctitan data prepare` replaces the dataset in its output folder DIR as one step, so that
// after any interruption (an error, Ctrl-C, kill -9, a power cut) a reader finds the whole old
// dataset or the whole new one. The folder's layout is data/shard.h's:
//   DIR/.shards-XXXXXX/   the shards of one prepare        DIR/.current -> .shards-XXXXXX
//   DIR/train_NNN.bin -> .current/train_NNN.bin (one link per shard)
//
//   begin    lock DIR (one prepare at a time), tidy what an interrupted prepare left, and make
//            the new staging folder DIR/.shards-XXXXXX, where the caller writes every shard
//   commit   fsync the shards; add the links of new shard names (they resolve only once the
//            new folder is current); switch DIR/.current to the new folder by one rename(2)
//            -- the moment the new dataset replaces the old --; then tidy: each shard name a
//            link, names the new dataset lacks removed, the old folder removed
//   abandon  remove the staging folder (the old dataset stays as it was)
//
// Tidying never removes the only complete dataset: the folder .current names is kept, and the
// shards of a folder without .current (written by an earlier ctitan, or by hand), and the
// staging folders an earlier ctitan left (.prepare-new-*, .prepare-old-*), go only once a
// complete new dataset is current. Only shard-named files (train_NNN.bin, val_NNN.bin) and the
// folders prepare makes are removed; any other file in DIR is let be.
//
// Failpoints (core/failpoint.h) at each step, for the crash tests: prepare.before_links,
// prepare.mid_links (after each link made; CTITAN_FAILPOINT_HIT picks which), prepare.before_switch,
// prepare.after_switch, prepare.mid_tidy (after each shard name put right), prepare.before_remove_old,
// and fs.switch_link inside each switch of a link (core/fs.h).
#ifndef CT_PREPARE_SWAP_H
#define CT_PREPARE_SWAP_H
#include <limits.h>
#include <stdbool.h>

#include "core/error.h"

typedef struct {
    char dir[PATH_MAX];      // DIR, as given
    char staging[PATH_MAX];  // DIR/.shards-XXXXXX: the caller writes the new shards here
    int lock_fd;             // holds the lock on DIR; -1 when none
    bool committed;          // the staging folder is DIR's dataset now
} ct_prep_swap;

// DIR must exist. CT_ERR (one line) when another prepare holds DIR, or a leftover cannot be
// tidied; nothing is changed then.
ct_status ct_prep_swap_begin(ct_prep_swap *s, const char *dir);

// Makes the staging folder's shards DIR's dataset (above); *replaced: the shard count of the
// dataset it replaced (0: none). On CT_ERR before the switch DIR's dataset is the old one and the
// staging folder is left for ct_prep_swap_abandon; after it, the new one is current and the error
// names what could not be tidied.
ct_status ct_prep_swap_commit(ct_prep_swap *s, int *replaced);

// Removes the staging folder (unless committed) and releases the lock.
void ct_prep_swap_end(ct_prep_swap *s);
#endif

#!/usr/bin/env bash
# `ctitan data prepare` speed and memory.
#
#   bash bench/prepare_speed.sh [speed|memory|all]      (default all)
#
# speed:  MB/s of input preparing a JSONL corpus of SPEED_MB (default 64) MB in 4 files, with
#         --threads 1 and 2, against tiktoken's encode_ordinary_batch with num_threads 1 and 2 on
#         the same documents with the same rank file and pattern (the Llama 3 one ctitan uses for
#         rank files). Runs alternate (ctitan 1, ctitan 2, tiktoken 1, tiktoken 2) REPS times
#         (default 3); medians are printed. tiktoken's time is encoding only: its JSON is parsed
#         before the clock starts, and nothing is written; prepare's time is everything (read,
#         parse, check UTF-8, encode, write shards). The tiktoken columns need python with tiktoken
#         (PYTHON, default /work/main/build/venv/bin/python, else python3): "-" when it is absent.
# memory: peak resident memory (/usr/bin/time -v) of prepare --threads 2 on a corpus of BIG_MB
#         (default 1024) MB of text and on one 10x smaller: the bound does not grow with the input.
#
# The tokenizer is a rank file trained here by `ctitan tokenizer train` (vocab 2000) on a slice
# of the corpus. The corpus is generated in WORK (default a temporary folder under /tmp, removed
# at the end): words drawn from a fixed list and made of syllables, with fixed seeds, so every
# run reads the same bytes.
set -eu
cd "$(dirname "$0")/.."
what=${1:-all}
bin=${BUILD:-build}/ctitan
[ -x "$bin" ] || { echo "prepare_speed: $bin not built (make)" >&2; exit 1; }
SPEED_MB=${SPEED_MB:-64}
BIG_MB=${BIG_MB:-1024}
REPS=${REPS:-3}
PYTHON=${PYTHON:-/work/main/build/venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
work=${WORK:-$(mktemp -d /tmp/prepare_speed.XXXXXX)}
mkdir -p "$work"
[ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT

# MB of JSONL documents (a few hundred words each) from seed $2 into $1.
gen_jsonl() {
  awk -v mb="$3" -v seed="$2" 'BEGIN {
    srand(seed)
    n = split("the of and to in is was for that with as on by at from his her an which or were be are " \
              "this had not it but have they one all their been has when who will more no if out so said " \
              "time people year world state government over only new some could these two may first then " \
              "après naïve über café 1984 2024 3.14 100,000 (see) [note] \"quoted\" don'\''t it'\''s we'\''ll", w, " ")
    m = split("ka to ri an el mo su ne ter ing ion pre con de ve la gra phi str und sch ei ou qua " \
              "ble tion ment ous ly er est al ic ist ful ness ward ize ph th ch sh gh", syl, " ")
    total = mb * 1000000; bytes = 0; id = 0
    while (bytes < total) {
      len = 50 + int(rand() * 400); s = ""
      for (i = 0; i < len; i++) {
        if (rand() < 0.6) x = w[1 + int(rand() * n)]
        else { x = ""; k = 1 + int(rand() * 4); for (j = 0; j < k; j++) x = x syl[1 + int(rand() * m)] }
        s = s (i ? " " : "") x; if (rand() < 0.06) s = s "."
      }
      gsub(/"/, "\\\"", s)
      line = sprintf("{\"id\": %d, \"text\": \"%s\"}", id++, s)
      print line; bytes += length(line) + 1
    }
  }'
}

tok="$work/bench.tok"
if [ ! -s "$tok" ]; then
  mkdir -p "$work/tokcorpus"
  gen_jsonl "$work/tokcorpus" 99 2 | sed 's/^{"id": [0-9]*, "text": "//; s/"}$//' >"$work/tokcorpus/sample.txt"
  "$bin" tokenizer train --input "$work/tokcorpus" --vocab-size 2000 --out "$tok" >/dev/null
fi

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
now() { date +%s.%N; }

speed() {
  local dir="$work/speed_$SPEED_MB"
  if [ ! -d "$dir" ]; then
    mkdir -p "$dir"
    for f in 0 1 2 3; do gen_jsonl "$dir" $((f + 1)) $((SPEED_MB / 4)) >"$dir/part_$f.jsonl"; done
  fi
  local bytes; bytes=$(cat "$dir"/*.jsonl | wc -c)
  local have_tt=0
  "$PYTHON" -c 'import tiktoken' 2>/dev/null && have_tt=1
  : >"$work/c1"; : >"$work/c2"; : >"$work/t1"; : >"$work/t2"; : >"$work/tt"
  for r in $(seq 1 "$REPS"); do
    for t in 1 2; do
      local t0; t0=$(now)
      "$bin" data prepare --input "$dir" --tokenizer "$tok" --out "$work/shards_speed" --threads $t --quiet >/dev/null
      awk -v a="$t0" -v b="$(now)" -v n="$bytes" 'BEGIN { printf "%.2f\n", n / 1e6 / (b - a) }' >>"$work/c$t"
    done
    if [ $have_tt = 1 ]; then
      "$PYTHON" - "$dir" "$tok" "$bytes" "$bin" >>"$work/tt" <<'EOF'
import glob, json, subprocess, sys, time
import tiktoken
from tiktoken.load import load_tiktoken_bpe
d, tok, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
plain = tok + ".ranks-only"  # tiktoken reads no "#special" lines
with open(tok) as f, open(plain, "w") as g:
    g.writelines(l for l in f if not l.startswith("#"))
pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
       r"|\s*[\r\n]+|\s+(?!\S)|\s+")
enc = tiktoken.Encoding("bench", pat_str=pat, mergeable_ranks=load_tiktoken_bpe(plain), special_tokens={})
texts = [json.loads(l)["text"] for p in sorted(glob.glob(d + "/*.jsonl")) for l in open(p, encoding="utf-8")]
# The same tokenizer: ctitan's ids for the first document are tiktoken's.
out = subprocess.run([sys.argv[4], "tokenizer", "encode", "--tokenizer", tok, "--text", texts[0]], capture_output=True,
                     text=True).stdout.split()
print("same_ids", int([int(x) for x in out] == enc.encode_ordinary(texts[0])))
for t in (1, 2):
    t0 = time.perf_counter()
    enc.encode_ordinary_batch(texts, num_threads=t)
    print(t, "%.2f" % (nbytes / 1e6 / (time.perf_counter() - t0)))
EOF
    fi
  done
  if [ $have_tt = 1 ]; then
    awk '$1 == 1 { print $2 }' "$work/tt" >"$work/t1"; awk '$1 == 2 { print $2 }' "$work/tt" >"$work/t2"
  fi
  local c1 c2 t1="-" t2="-"
  c1=$(median <"$work/c1"); c2=$(median <"$work/c2")
  [ $have_tt = 1 ] && { t1=$(median <"$work/t1"); t2=$(median <"$work/t2"); }
  echo "speed: $((bytes / 1000000)) MB JSONL in 4 files, medians of $REPS (MB/s of input); $(nproc) CPUs, load average $(cut -d" " -f1-3 /proc/loadavg)"
  echo "  ctitan prepare --threads 1: $c1   (runs: $(tr '\n' ' ' <"$work/c1"))"
  echo "  ctitan prepare --threads 2: $c2   (runs: $(tr '\n' ' ' <"$work/c2"))"
  echo "  tiktoken encode_ordinary_batch num_threads=1: $t1"
  echo "  tiktoken encode_ordinary_batch num_threads=2: $t2"
  if [ $have_tt = 1 ]; then
    grep -q '^same_ids 0' "$work/tt" && echo "  WARNING: ctitan's ids differ from tiktoken's on the first document"
    grep -q '^same_ids 1' "$work/tt" && echo "  (ctitan's ids for the first document are tiktoken's)"
  else echo "  (tiktoken: not importable by $PYTHON; columns skipped)"; fi
}

peak_kb() {  # corpus dir -> peak RSS in kB of prepare --threads 2
  /usr/bin/time -v "$bin" data prepare --input "$1" --tokenizer "$tok" --out "$work/shards_mem" --threads 2 --quiet \
    2>"$work/time.log" >/dev/null
  awk -F: '/Maximum resident set size/ { gsub(/ /, "", $2); print $2 }' "$work/time.log"
}

memory() {
  local big="$work/mem_big" small="$work/mem_small"
  if [ ! -d "$big" ]; then
    mkdir -p "$big" "$small"
    for f in 0 1 2 3; do gen_jsonl "$big" $((f + 11)) $((BIG_MB / 4)) >"$big/part_$f.jsonl"; done
    for f in 0 1 2 3; do gen_jsonl "$small" $((f + 11)) $((BIG_MB / 40)) >"$small/part_$f.jsonl"; done
  fi
  local kb_big kb_small
  kb_small=$(peak_kb "$small"); kb_big=$(peak_kb "$big")
  echo "memory: peak resident, prepare --threads 2"
  echo "  $(du -sm "$small" | cut -f1) MB corpus: $((kb_small / 1024)) MiB"
  echo "  $(du -sm "$big" | cut -f1) MB corpus: $((kb_big / 1024)) MiB"
  rm -rf "$work/shards_mem"
}

case $what in
  speed) speed ;;
  memory) memory ;;
  all) speed; memory ;;
  *) echo "prepare_speed: unknown part '$what' (speed, memory or all)" >&2; exit 2 ;;
esac

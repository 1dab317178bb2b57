#!/usr/bin/env bash
# `data prepare --threads N`: the shards are the same bytes for 1, 2 and 4 threads on plain
# text, JSONL, JSONL.gz, a folder of mixed files, and files large enough to be split into many
# chunks (over 1 MiB each); the document counts are the ones the generator wrote; a corrupt
# file in the middle of a corpus stops every thread, names the file in one line and leaves the
# earlier shards as they were. Needs $BUILD/ctitan (make); fails when it is not built.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL prepare_threads: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass() { echo "PASS $1"; }
failc() { echo "FAIL $1: $2"; }

# A tokenizer trained here (its own EOS, <|end_of_text|>).
mkdir "$tmp/tokcorpus"
for i in $(seq 1 100); do echo "the other thing is there, then $i things think in héllo wörld's"; done >"$tmp/tokcorpus/a.txt"
"$bin" tokenizer train --input "$tmp/tokcorpus" --vocab-size 300 --out "$tmp/t.tok" >/dev/null 2>&1 ||
  { echo "FAIL prepare_threads: tokenizer train"; exit 1; }

# Documents: line i of a generator, words varied by i so chunks differ. $2 documents from $1.
gen_lines() { awk -v a="$1" -v n="$2" 'BEGIN { for (i = a; i < a + n; i++)
  printf "document %d: the quick brown fox %d jumps over %x lazy dogs, héllo wörld %d times\n", i, i * 7, i * 13, i % 97 }'; }
gen_jsonl() { gen_lines "$1" "$2" | awk '{ printf "{\"id\": %d, \"text\": \"%s\"}\n", NR, $0 }'; }
gen_fortune() { gen_lines "$1" "$2" | awk '{ print; if (NR % 3 == 0) print "%" }'; }

mkdir -p "$tmp/c/text" "$tmp/c/jsonl" "$tmp/c/gz" "$tmp/c/mixed" "$tmp/c/big"
gen_fortune 0 3000 >"$tmp/c/text/fortunes"                 # 1000 fortunes
gen_jsonl 0 3000 >"$tmp/c/jsonl/docs.jsonl"                # 3000 lines
gen_jsonl 0 3000 | gzip -c >"$tmp/c/gz/docs.jsonl.gz"
gen_fortune 100 300 >"$tmp/c/mixed/a_fortunes"             # 100 fortunes
gen_jsonl 200 500 >"$tmp/c/mixed/b.jsonl"                  # 500
gen_jsonl 300 400 | gzip -c >"$tmp/c/mixed/c.jsonl.gz"      # 400
gen_lines 0 5 >"$tmp/c/mixed/d.txt"                        # 1 (a plain file is one document)
gen_jsonl 0 30000 >"$tmp/c/big/big.jsonl"                  # 30000 lines, about 3.6 MB: 4 chunks
gen_fortune 0 30000 | gzip -c >"$tmp/c/big/fortunes.gz"    # 10000 fortunes, about 3.3 MB of text
declare -A want=([text]=1000 [jsonl]=3000 [gz]=3000 [mixed]=1001 [big]=40000)

# The shards as the loader finds them: in the folder .current names when there is one (data/shard.h).
hash_of() { (cd "$1" && { [ ! -L .current ] || cd .current; } && ls train_*.bin val_*.bin 2>/dev/null | xargs cat |
             sha256sum | cut -c1-16); }
docs_of() { awk '/^train:/ { t = $2 } /^val:/ { v = $2 } END { print t + v }' "$1"; }

for name in text jsonl gz mixed big; do
  h1=""; ok=1; why=""
  for t in 1 2 4; do
    out="$tmp/out_${name}_$t"
    if ! "$bin" data prepare --input "$tmp/c/$name" --tokenizer "$tmp/t.tok" --out "$out" --threads $t \
         --shard-tokens 100000 --quiet >"$tmp/log_$t" 2>&1; then
      ok=0; why="--threads $t failed: $(tail -1 "$tmp/log_$t")"; break
    fi
    h=$(hash_of "$out")
    if [ $t = 1 ]; then
      h1=$h
      d=$(docs_of "$tmp/log_1")
      [ "$d" = "${want[$name]}" ] || { ok=0; why="$d documents, expected ${want[$name]}"; break; }
    elif [ "$h" != "$h1" ]; then ok=0; why="--threads $t shards $h, --threads 1 $h1"; break; fi
  done
  if [ $ok = 1 ]; then pass "prepare_threads_same_shards_$name"; else failc "prepare_threads_same_shards_$name" "$why"; fi
done
# The big corpus really spans several shards (the swap and the shard boundaries under threads).
n=$(ls "$tmp/out_big_4"/train_*.bin 2>/dev/null | wc -l)
if [ "$n" -ge 3 ]; then pass prepare_threads_several_shards; else failc prepare_threads_several_shards "$n train shards"; fi

# A corrupt file in the middle: b.jsonl holds invalid UTF-8 deep inside (after several chunks
# of good lines). The earlier dataset in the out folder stays as it was; nothing half-written.
mkdir -p "$tmp/bad"
gen_jsonl 0 3000 >"$tmp/bad/a.jsonl"
{ gen_jsonl 0 20000; printf '{"text": "broken \377\376 bytes"}\n'; gen_jsonl 0 100; } >"$tmp/bad/b.jsonl"
gen_jsonl 0 3000 >"$tmp/bad/c.jsonl"
out="$tmp/out_bad"
"$bin" data prepare --input "$tmp/c/mixed" --tokenizer "$tmp/t.tok" --out "$out" --quiet >/dev/null 2>&1
before=$(hash_of "$out")
for t in 1 4; do
  err=$("$bin" data prepare --input "$tmp/bad" --tokenizer "$tmp/t.tok" --out "$out" --threads $t --quiet 2>&1 >/dev/null); rc=$?
  after=$(hash_of "$out")
  left=$(ls -A "$out" | grep -c '^\.shards-' || true); left=$((left - 1))  # the current one stays
  if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"b.jsonl"* ]] &&
     [ "$after" = "$before" ] && [ "$left" = 0 ]; then pass "prepare_threads_corrupt_file_$t"
  else failc "prepare_threads_corrupt_file_$t" "rc=$rc err='$err' shards $before -> $after, $left staging folders left"; fi
done

# Interrupted (SIGINT, SIGKILL) while 4 threads are at work: the out folder holds either the
# earlier dataset or the whole new one (if the prepare had finished), never a mix; the loader
# never sees the hidden staging folder, and the next prepare removes what a SIGKILL left.
# (tests/test_prepare_crash.c kills a prepare at each step of the replacement itself.)
out="$tmp/out_intr"
"$bin" data prepare --input "$tmp/c/mixed" --tokenizer "$tmp/t.tok" --out "$out" --shard-tokens 100000 --quiet >/dev/null 2>&1
old=$(hash_of "$out"); new=$(hash_of "$tmp/out_big_1")
for sig in INT KILL; do
  "$bin" data prepare --input "$tmp/c/big" --tokenizer "$tmp/t.tok" --out "$out" --threads 4 --shard-tokens 100000 \
    --quiet >/dev/null 2>&1 &
  pid=$!
  sleep 0.3
  kill -s $sig $pid 2>/dev/null
  wait $pid 2>/dev/null
  now=$(hash_of "$out")
  if [ "$now" = "$old" ] || [ "$now" = "$new" ]; then pass "prepare_threads_interrupted_$sig"
  else failc "prepare_threads_interrupted_$sig" "shards $now: neither the old $old nor the new $new"; fi
  "$bin" data prepare --input "$tmp/c/mixed" --tokenizer "$tmp/t.tok" --out "$out" --shard-tokens 100000 --quiet \
    >/dev/null 2>&1  # back to the old dataset for the next signal
  folders=$(ls -A "$out" | grep -c '^\.shards-' || true)
  if [ "$(hash_of "$out")" = "$old" ] && [ "$folders" = 1 ]; then pass "prepare_threads_tidied_after_$sig"
  else failc "prepare_threads_tidied_after_$sig" "$folders folders of shards: $(ls -A "$out" | tr '\n' ' ')"; fi
done

# --threads out of range: one line naming the option.
err=$("$bin" data prepare --input "$tmp/c/text" --tokenizer "$tmp/t.tok" --out "$tmp/o0" --threads 0 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"--threads"* ]] && [ ! -e "$tmp/o0" ]; then
  pass prepare_threads_bad_count
else failc prepare_threads_bad_count "rc=$rc err='$err'"; fi

# Progress lines carry the rate and the time left.
"$bin" data prepare --input "$tmp/c/big" --tokenizer "$tmp/t.tok" --out "$tmp/o_prog" --threads 2 >/dev/null 2>"$tmp/prog"
if grep -q 'MB/s, ETA [0-9]' "$tmp/prog" && grep -q '100%' "$tmp/prog"; then pass prepare_threads_progress_rate_eta
else failc prepare_threads_progress_rate_eta "$(head -3 "$tmp/prog")"; fi

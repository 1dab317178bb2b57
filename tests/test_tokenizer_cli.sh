#!/usr/bin/env bash
# `ctitan tokenizer` end to end: train on a directory, encode, decode back, and the one-line
# errors. Needs $BUILD/ctitan (make); fails when it is not built.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}  # CT_BIN: another binary (a test driver)
[ -x "$bin" ] || { echo "FAIL tokenizer_cli: $bin not built (make)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/corpus"
for i in $(seq 1 200); do echo "the other thing is there, then $i things think in héllo wörld's"; done >"$tmp/corpus/a.txt"
printf 'it'"'"'s 12345 over the lazy dog\n' >"$tmp/corpus/b.txt"

pass() { echo "PASS $1"; }
failc() { echo "FAIL $1: $2"; }

# train on a DIR, 300 = 298 ranks + 2 specials
if out=$("$bin" tokenizer train --input "$tmp/corpus" --vocab-size 300 --out "$tmp/t.tok" 2>&1) &&
   [ "$(grep -vc '^#' "$tmp/t.tok")" -eq 298 ]; then pass cli_train; else failc cli_train "$out"; fi

# encode then decode gives the text back (with bos/eos at 298/299)
text="the other thing, héllo wörld 12345"
ids=$("$bin" tokenizer encode --tokenizer "$tmp/t.tok" --text "$text" --bos --eos 2>&1)
first=${ids%% *}; last=${ids##* }
if [ "$first" = 298 ] && [ "$last" = 299 ]; then pass cli_encode_specials; else failc cli_encode_specials "$ids"; fi
inner=$("$bin" tokenizer encode --tokenizer "$tmp/t.tok" --text "$text" 2>&1)
back=$("$bin" tokenizer decode --tokenizer "$tmp/t.tok" --ids "$inner" 2>&1)
if [ "$back" = "$text" ]; then pass cli_round_trip; else failc cli_round_trip "got '$back' from '$inner'"; fi

# encode --input reads a file
printf 'the lazy dog' >"$tmp/in.txt"
a=$("$bin" tokenizer encode --tokenizer "$tmp/t.tok" --input "$tmp/in.txt" 2>&1)
b=$("$bin" tokenizer encode --tokenizer "$tmp/t.tok" --text 'the lazy dog' 2>&1)
if [ -n "$a" ] && [ "$a" = "$b" ]; then pass cli_encode_input; else failc cli_encode_input "'$a' vs '$b'"; fi

# errors: one line on stderr, non-zero exit
check_err() {  # name, expected word, command...
  local name=$1 word=$2; shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"$word"* ]]; then pass "$name"
  else failc "$name" "rc=$rc err='$err'"; fi
}
check_err cli_bad_id "not in the vocabulary" "$bin" tokenizer decode --tokenizer "$tmp/t.tok" --ids "1 99999"
check_err cli_bad_ids_text "not a list of integers" "$bin" tokenizer decode --tokenizer "$tmp/t.tok" --ids "1 two"
check_err cli_missing_tokenizer "cannot open" "$bin" tokenizer encode --tokenizer "$tmp/none.tok" --text hi
check_err cli_bad_rank_file "bad base64" "$bin" tokenizer encode --tokenizer tests/fixtures/tokenizer/bad_base64.tiktoken --text hi
check_err cli_vocab_too_big "runs out of pairs" "$bin" tokenizer train --input "$tmp/corpus" --vocab-size 100000 --out "$tmp/x.tok"
check_err cli_missing_args "needs" "$bin" tokenizer train --input "$tmp/corpus"
check_err cli_unknown_sub "unknown subcommand" "$bin" tokenizer frobnicate

# `tokenizer train --input DIR` reads the files `data prepare --input DIR` reads: a binary index
# (fortune's *.dat) and a *.u8 duplicate change nothing, so the tokenizer equals the one trained
# on the text file alone.
mkdir -p "$tmp/mixed"
cp "$tmp/corpus"/* "$tmp/mixed/" 2>/dev/null || cp "$tmp/corpus" "$tmp/mixed/text"
printf 'binary\0index\001\002' >"$tmp/mixed/zz.dat"
printf 'a duplicate in another encoding zzzz qqqq zzzz qqqq\n' >"$tmp/mixed/text.u8"
"$bin" tokenizer train --input "$tmp/mixed" --vocab-size 300 --out "$tmp/mixed.tok" >/dev/null 2>&1
"$bin" tokenizer train --input "$tmp/corpus" --vocab-size 300 --out "$tmp/plain.tok" >/dev/null 2>&1
if [ -s "$tmp/mixed.tok" ] && cmp -s "$tmp/mixed.tok" "$tmp/plain.tok"; then pass cli_train_reads_what_prepare_reads
else failc cli_train_reads_what_prepare_reads "the tokenizers differ"; fi

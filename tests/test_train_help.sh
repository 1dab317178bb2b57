#!/usr/bin/env bash
# `ctitan train --help`: the settings grouped by section under a header each, wrapped to 80
# columns when stdout is not a terminal (COLUMNS wins when set); `--help SECTION` shows one
# section; an unknown section is one line on stderr naming the sections, and status 2.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL train_help: $bin not built (make)"; exit 1; }
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
widest() { awk '{ if (length > m) m = length } END { print m + 0 }'; }

out=$(env -u COLUMNS "$bin" train --help); rc=$?
w=$(widest <<<"$out")
if [ $rc -eq 0 ] && [ "$w" -le 80 ] && [ "$(grep -c '^  --' <<<"$out")" -gt 90 ]; then pass train_help_fits_80_columns
else fail train_help_fits_80_columns "rc $rc, widest line $w"; fi
for h in '^\[top\] ' '^\[job\]$' '^\[model\]$' '^\[training\]$' '^\[parallelism\]$' '^\[checkpoint\]$' '^\[ignored\] '; do
  [ "$(grep -c "$h" <<<"$out")" = 1 ] || { fail train_help_sections "header $h: $(grep -c "$h" <<<"$out") times"; h=; break; }
done
[ -n "$h" ] && pass train_help_sections

w=$(COLUMNS=60 "$bin" train --help | widest)
[ "$w" -le 60 ] && pass train_help_honours_columns || fail train_help_honours_columns "widest line $w at COLUMNS=60"
w=$(COLUMNS=150 "$bin" train --help | widest)
[ "$w" -gt 80 ] && [ "$w" -le 150 ] && pass train_help_wider_columns || fail train_help_wider_columns "widest line $w at COLUMNS=150"

out=$(env -u COLUMNS "$bin" train --help training); rc=$?
settings=$(grep '^  --' <<<"$out")
if [ $rc -eq 0 ] && [ -n "$settings" ] && ! grep -v '^  --training\.' <<<"$settings" | grep -q . &&
   grep -q '^  --training.seq_len ' <<<"$out" && ! grep -q '^\[model\]' <<<"$out"; then pass train_help_one_section
else fail train_help_one_section "rc $rc: $(grep -v '^  --training\.' <<<"$settings" | head -2)"; fi
out=$("$bin" train --help=ignored); 
grep -q '^  model.hf_assets_path' <<<"$out" && ! grep -q '^  --' <<<"$out" && pass train_help_ignored_section ||
  fail train_help_ignored_section "$(head -3 <<<"$out")"

"$bin" train --help trainnig >"${TMPDIR:-/tmp}/ct_help_out.$$" 2>"${TMPDIR:-/tmp}/ct_help_err.$$"; rc=$?
err=$(cat "${TMPDIR:-/tmp}/ct_help_err.$$"); said=$(cat "${TMPDIR:-/tmp}/ct_help_out.$$")
rm -f "${TMPDIR:-/tmp}/ct_help_out.$$" "${TMPDIR:-/tmp}/ct_help_err.$$"
if [ $rc -eq 2 ] && [ -z "$said" ] && [ "$(grep -c . <<<"$err")" = 1 ] &&
   grep -q "^ctitan train --help: no section 'trainnig' (sections: top, job, model, training, .*, checkpoint, ignored)$" <<<"$err"; then
  pass train_help_unknown_section
else fail train_help_unknown_section "rc $rc: $err"; fi

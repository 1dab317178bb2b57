#!/usr/bin/env bash
# `ctitan plot` end to end on two hand-written metrics.jsonl files with known values (one with
# validation losses and a null loss): the SVG parses as XML (xmllint), has one training-loss
# polyline per run with one point per finite loss, maps the known values onto the plot area
# (largest loss on its top edge, smallest on its bottom edge, steps and tokens along x, log scale),
# names both runs in the legend; --diff, --png, and one-line refusals of bad input that leave no
# file behind. Needs $BUILD/ctitan (make); fails when it is not built.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL plot: $bin not built (make)"; exit 1; }
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

pass() { echo "PASS $1"; }
failc() { echo "FAIL $1: $2"; }

mem='"memory_peak_mib": {"params": 1.00, "activations": 2.00}'
mkdir -p "$tmp/runA" "$tmp/runB"
# runA: loss 4.0 .. 2.0 with a null at step 3 (a non-finite loss), validation at steps 3 and 5.
# tokens_per_s x step_seconds = 2050: config.toml's seq_len 256 snaps it to 2048 per step.
cat >"$tmp/runA/metrics.jsonl" <<EOF
{"step": 1, "loss": 4.000000, "grad_norm": 1.5, "lr": 1.0e-04, "step_seconds": 2.0500, "tokens_per_s": 1000.0, $mem, "time": 1.0}
{"step": 2, "loss": 3.500000, "grad_norm": 1.2, "lr": 2.0e-04, "step_seconds": 2.0500, "tokens_per_s": 1000.0, $mem, "time": 2.0}
{"step": 3, "loss": null, "grad_norm": null, "lr": 3.0e-04, "step_seconds": 2.0500, "tokens_per_s": 1000.0, "val_loss": 3.250000, $mem, "time": 3.0}
{"step": 4, "loss": 2.500000, "grad_norm": 0.9, "lr": 4.0e-04, "step_seconds": 2.0500, "tokens_per_s": 1000.0, $mem, "time": 4.0}
{"step": 5, "loss": 2.000000, "grad_norm": 0.8, "lr": 5.0e-04, "step_seconds": 2.0500, "tokens_per_s": 1000.0, "val_loss": 2.250000, $mem, "time": 5.0}
EOF
printf '[training]\nseq_len = 256\n' >"$tmp/runA/config.toml"
# runB: no validation, no config.toml (tokens per step: 500 x 4.096 = 2048), a blank last line.
cat >"$tmp/runB/metrics.jsonl" <<EOF
{"step": 1, "loss": 3.800000, "step_seconds": 4.0960, "tokens_per_s": 500.0, $mem, "time": 1.0}
{"step": 2, "loss": 3.000000, "step_seconds": 4.0960, "tokens_per_s": 500.0, $mem, "time": 2.0}
{"step": 3, "loss": 2.600000, "step_seconds": 4.0960, "tokens_per_s": 500.0, $mem, "time": 3.0}

EOF
A=$tmp/runA/metrics.jsonl B=$tmp/runB/metrics.jsonl

# The plot area (x y w h) and the points of each polyline of class $2, one line per polyline.
area() { sed -n 's/.*<rect class="plot-area" x="\([^"]*\)" y="\([^"]*\)" width="\([^"]*\)" height="\([^"]*\)".*/\1 \2 \3 \4/p' "$1"; }
lines() { grep "<polyline class=\"$2\"" "$1" | sed 's/.* points="\([^"]*\)".*/\1/'; }
# near A B: |A - B| <= 0.011 (coordinates are written with two decimals)
near() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(d <= 0.011 && d >= -0.011) }'; }
# point N (1-based) of a points list, as "x y"
point() { tr ' ' '\n' <<<"$1" | sed -n "${2}p" | tr ',' ' '; }
wellformed() { xmllint --noout "$1" 2>&1; }

if ! command -v xmllint >/dev/null; then
  failc plot_xmllint "xmllint not found (scripts/setup.sh installs libxml2-utils)"
fi

# ---- two runs against the step ----------------------------------------------------------------
out=$("$bin" plot "$A" "$B" --out "$tmp/loss.svg" --title 'Two & <runs>' 2>&1); rc=$?
if [ $rc -eq 0 ] && [ -s "$tmp/loss.svg" ]; then pass plot_writes_svg; else failc plot_writes_svg "rc=$rc $out"; fi
if err=$(wellformed "$tmp/loss.svg"); then pass plot_svg_is_xml; else failc plot_svg_is_xml "$err"; fi
mapfile -t pts < <(lines "$tmp/loss.svg" loss)
n1=$(wc -w <<<"${pts[0]:-}"); n2=$(wc -w <<<"${pts[1]:-}")
if [ ${#pts[@]} -eq 2 ] && [ "$n1" -eq 4 ] && [ "$n2" -eq 3 ]; then pass plot_one_polyline_per_run_null_skipped
else failc plot_one_polyline_per_run_null_skipped "${#pts[@]} polylines, $n1 and $n2 points"; fi
mapfile -t vpts < <(lines "$tmp/loss.svg" val-loss)
if [ ${#vpts[@]} -eq 1 ] && [ "$(wc -w <<<"${vpts[0]}")" -eq 2 ] && grep -q 'class="val-loss"[^>]*stroke="#4e79a7"[^>]*stroke-dasharray' "$tmp/loss.svg" \
   && grep -q 'class="loss"[^>]*stroke="#4e79a7"' "$tmp/loss.svg"
then pass plot_val_loss_dashed_same_colour; else failc plot_val_loss_dashed_same_colour "${vpts[*]:-none}"; fi

# Losses 2..4 give the axis [2, 4] (step 0.5) and steps 1..5 the axis [0, 5]: loss 4.0 at step 1
# lies on the top edge a fifth of the way along, loss 2.0 at step 5 in the bottom right corner,
# val 3.25 at step 3 three eighths of the way down.
read -r ax ay aw ah <<<"$(area "$tmp/loss.svg")"
read -r x1 y1 <<<"$(point "${pts[0]:-}" 1)"
read -r x4 y4 <<<"$(point "${pts[0]:-}" 4)"
read -r vx1 vy1 <<<"$(point "${vpts[0]:-}" 1)"
if [ -n "${ah:-}" ] && near "$y1" "$ay" && near "$x1" "$(awk -v a="$ax" -v w="$aw" 'BEGIN{printf "%.2f", a + w/5}')" \
   && near "$y4" "$(awk -v a="$ay" -v h="$ah" 'BEGIN{printf "%.2f", a + h}')" \
   && near "$x4" "$(awk -v a="$ax" -v w="$aw" 'BEGIN{printf "%.2f", a + w}')" \
   && near "$vy1" "$(awk -v a="$ay" -v h="$ah" 'BEGIN{printf "%.2f", a + h*0.375}')" \
   && near "$vx1" "$(awk -v a="$ax" -v w="$aw" 'BEGIN{printf "%.2f", a + w*0.6}')"
then pass plot_points_map_values; else failc plot_points_map_values "area '$ax $ay $aw $ah' first '$x1 $y1' last '$x4 $y4' val '$vx1 $vy1'"; fi
yt=$(sed -n 's/.*class="ytick"[^>]*>\([^<]*\)<.*/\1/p' "$tmp/loss.svg" | tr '\n' ' ')
xt=$(sed -n 's/.*class="xtick"[^>]*>\([^<]*\)<.*/\1/p' "$tmp/loss.svg" | tr '\n' ' ')
if [ "$yt" = "2.0 2.5 3.0 3.5 4.0 " ] && [ "$xt" = "0 1 2 3 4 5 " ]; then pass plot_ticks_1_2_5
else failc plot_ticks_1_2_5 "y '$yt' x '$xt'"; fi
if grep -q 'class="legend"[^>]*>runA  (val 2.2500)</text>' "$tmp/loss.svg" && grep -q 'class="legend"[^>]*>runB</text>' "$tmp/loss.svg" \
   && grep -q '>Two &amp; &lt;runs&gt;</text>' "$tmp/loss.svg"
then pass plot_legend_names_runs; else failc plot_legend_names_runs "$(grep -o 'class="legend"[^<]*' "$tmp/loss.svg")"; fi

# ---- tokens along x, log y ----------------------------------------------------------------------
# 2048 tokens per step in both runs: step 5 is 10240 tokens on an axis to 12000 (2k steps).
"$bin" plot "$A" "$B" --out "$tmp/tok.svg" --x tokens >/dev/null 2>&1
mapfile -t pts < <(lines "$tmp/tok.svg" loss)
read -r ax ay aw ah <<<"$(area "$tmp/tok.svg")"
read -r x4 y4 <<<"$(point "${pts[0]:-}" 4)"
read -r bx3 by3 <<<"$(point "${pts[1]:-}" 3)"
if [ -n "${ah:-}" ] && near "$x4" "$(awk -v a="$ax" -v w="$aw" 'BEGIN{printf "%.2f", a + w*10240/12000}')" \
   && near "$bx3" "$(awk -v a="$ax" -v w="$aw" 'BEGIN{printf "%.2f", a + w*6144/12000}')" \
   && grep -q '>tokens seen</text>' "$tmp/tok.svg" && grep -q 'class="xtick"[^>]*>12k<' "$tmp/tok.svg"
then pass plot_x_tokens; else failc plot_x_tokens "area '$ax $aw' A5 x '$x4' B3 x '$bx3'"; fi
"$bin" plot "$A" "$B" --out "$tmp/log.svg" --logy >/dev/null 2>&1
mapfile -t pts < <(lines "$tmp/log.svg" loss)
read -r ax ay aw ah <<<"$(area "$tmp/log.svg")"
read -r x3 y3 <<<"$(point "${pts[0]:-}" 3)"  # loss 2.5 on a log axis [2, 4]
if [ -n "${ah:-}" ] && near "$y3" "$(awk -v a="$ay" -v h="$ah" 'BEGIN{printf "%.2f", a + h*(1 - log(1.25)/log(2))}')" \
   && wellformed "$tmp/log.svg" >/dev/null && grep -q 'loss (log scale)' "$tmp/log.svg"
then pass plot_logy; else failc plot_logy "area '$ay $ah' y '$y3'"; fi

# ---- the difference panel: runB minus runA at the steps both have (1 and 2) ----------------------
"$bin" plot "$A" "$B" --out "$tmp/diff.svg" --diff --smooth 3 >/dev/null 2>&1
mapfile -t dpts < <(lines "$tmp/diff.svg" loss-diff)
if [ ${#dpts[@]} -eq 1 ] && [ "$(wc -w <<<"${dpts[0]}")" -eq 2 ] && wellformed "$tmp/diff.svg" >/dev/null
then pass plot_diff_panel; else failc plot_diff_panel "${dpts[*]:-none}"; fi

# ---- PNG ----------------------------------------------------------------------------------------
# Without a converter on PATH: refused up front, nothing written.
mkdir -p "$tmp/emptybin"
out=$(PATH=$tmp/emptybin "$bin" plot "$A" --out "$tmp/nopng.svg" --png 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c . <<<"$out")" -eq 1 ] && grep -q 'rsvg-convert' <<<"$out" && [ ! -e "$tmp/nopng.svg" ] \
   && [ ! -e "$tmp/nopng.png" ]
then pass plot_png_without_converter; else failc plot_png_without_converter "rc=$rc $out"; fi
if command -v rsvg-convert >/dev/null; then
  out=$("$bin" plot "$A" "$B" --out "$tmp/pic.svg" --png 2>&1); rc=$?
  if [ $rc -eq 0 ] && [ "$(head -c 8 "$tmp/pic.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]
  then pass plot_png; else failc plot_png "rc=$rc $out"; fi
else
  echo "SKIP plot_png: no rsvg-convert here"
fi

# ---- help and refusals --------------------------------------------------------------------------
out=$("$bin" plot --help 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q '^usage: ctitan plot' <<<"$out"; then pass plot_help; else failc plot_help "rc=$rc"; fi
if "$bin" --help | grep -q '^  plot '; then pass plot_in_command_list; else failc plot_in_command_list "not listed"; fi

# refuse NAME WANT_IN_MESSAGE ARGS...: non-zero, one line on stderr containing WANT, no output file.
refuse() {
  local name=$1 want=$2 out rc; shift 2
  rm -f "$tmp/bad.svg"
  out=$("$bin" plot "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c . <<<"$out")" -eq 1 ] && grep -qF -- "$want" <<<"$out" && [ ! -e "$tmp/bad.svg" ]
  then pass "$name"; else failc "$name" "rc=$rc: $out"; fi
}
printf '{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.9,}\n' >"$tmp/notjson.jsonl"
printf '{"step": 1, "loss": null, "val_loss": 3.0}\n{"step": 2, "grad_norm": 1.0}\n' >"$tmp/noloss.jsonl"
: >"$tmp/empty.jsonl"
printf '{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.9}\n{"step": 1, "loss": 3.1}\n' >"$tmp/twice.jsonl"
printf '{"step": 1, "loss": "3.0"}\n' >"$tmp/string.jsonl"
printf '[1, 2]\n' >"$tmp/array.jsonl"
printf '{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 0}\n' >"$tmp/zero.jsonl"
refuse plot_refuses_missing_file "$tmp/nope.jsonl: cannot open" "$tmp/nope.jsonl" --out "$tmp/bad.svg"
refuse plot_refuses_line_not_json "$tmp/notjson.jsonl:2:" "$A" "$tmp/notjson.jsonl" --out "$tmp/bad.svg"
refuse plot_refuses_no_loss "$tmp/noloss.jsonl: no loss values" "$tmp/noloss.jsonl" --out "$tmp/bad.svg"
refuse plot_refuses_empty_file "$tmp/empty.jsonl: no loss values" "$tmp/empty.jsonl" --out "$tmp/bad.svg"
refuse plot_refuses_step_going_back "$tmp/twice.jsonl:3: step 1 after step 2" "$tmp/twice.jsonl" --out "$tmp/bad.svg"
refuse plot_refuses_loss_not_number "$tmp/string.jsonl:1: \"loss\" is not a number" "$tmp/string.jsonl" --out "$tmp/bad.svg"
refuse plot_refuses_not_object "$tmp/array.jsonl:1: not a JSON object" "$tmp/array.jsonl" --out "$tmp/bad.svg"
refuse plot_refuses_folder "$tmp/runA: is a folder" "$tmp/runA" --out "$tmp/bad.svg"
refuse plot_refuses_zero_on_log_axis "log axis" "$tmp/zero.jsonl" --out "$tmp/bad.svg" --logy
refuse plot_refuses_tokens_without_rates "no tokens_per_s" "$tmp/zero.jsonl" --out "$tmp/bad.svg" --x tokens
refuse plot_refuses_no_out "needs --out" "$A"
refuse plot_refuses_no_input "at least one metrics.jsonl" --out "$tmp/bad.svg"
refuse plot_refuses_bad_x "--x: expected step or tokens" "$A" --out "$tmp/bad.svg" --x time
refuse plot_refuses_unknown_option "unknown option '--colour'" "$A" --out "$tmp/bad.svg" --colour red
refuse plot_refuses_missing_value "--title: expected a value" "$A" --out "$tmp/bad.svg" --title
# An unwritable output: the error names it, and no temporary file is left behind.
refuse plot_refuses_unwritable_out "$tmp/no/such/dir/x.svg" "$A" --out "$tmp/no/such/dir/x.svg"

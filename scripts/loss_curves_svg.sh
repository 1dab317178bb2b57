#!/usr/bin/env bash
# Draws the training loss of one or more runs against the step as an SVG line chart (plain awk).
#   scripts/loss_curves_svg.sh OUT.svg LABEL=METRICS.jsonl [LABEL=METRICS.jsonl ...]
# Reads "step", "loss" and "val_loss" from each line of each run's metrics.jsonl (the trainer's
# <dump_folder>/metrics.jsonl). Each run gets its own colour; validation losses are circles on
# its curve, and the legend gives each run's last validation loss.
# Environment:
#   TITLE          chart title (default "Training loss")
#   SMOOTH         centred moving-average window in steps (default 10): runs with at least 3 windows
#                  of points get a bold averaged line over a faint raw one; 0 = raw lines only
#   DIFF=1         add a lower panel with each run's loss minus the first run's, at the same steps
#                  (averaged like the upper panel), for runs too close to tell apart above
#   WIDTH, HEIGHT  pixels (default 900 x 500, or 900 x 760 with DIFF=1)
#   YMIN, YMAX     fix the loss axis instead of fitting it to the data
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 OUT.svg LABEL=METRICS.jsonl [LABEL=METRICS.jsonl ...]" >&2
  exit 2
fi
out=$1; shift
files=(); k=0
for spec in "$@"; do
  case $spec in
    *=*) label=${spec%%=*}; file=${spec#*=} ;;
    *) label=$(basename "$(dirname "$spec")"); file=$spec ;;
  esac
  if ! grep -q '"loss"' "$file" 2>/dev/null; then
    echo "$0: $file: no loss values (missing or empty metrics file)" >&2
    exit 1
  fi
  k=$((k + 1))
  export "CT_SVG_LABEL_$k=$label"
  files+=("$file")
done
diff=${DIFF:-0}; [ "$k" -ge 2 ] || diff=0
height=${HEIGHT:-$([ "$diff" = 1 ] && echo 760 || echo 500)}

awk -v nruns="$k" -v title="${TITLE:-Training loss}" -v smooth="${SMOOTH:-10}" -v diff="$diff" \
    -v W="${WIDTH:-900}" -v H="$height" -v ymin_fix="${YMIN:-}" -v ymax_fix="${YMAX:-}" '
function fl(x) { return (x >= 0 || x == int(x)) ? int(x) : int(x) - 1 }
function log10(x) { return log(x) / log(10) }
function nicestep(range, n,   raw, mag, f) {
  raw = range / n; mag = 10 ^ fl(log10(raw)); f = raw / mag
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag
}
function decimals(step,   d) { d = -fl(log10(step) + 1e-9); return d > 0 ? d : 0 }
function esc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s); gsub(/"/, "\\&quot;", s); return s }
function num(key,   v) {   # the number after "key": in this line, or "" when absent / not a number
  if (!match($0, "[{,] *\"" key "\": *-?[0-9][0-9.eE+-]*")) return ""
  v = substr($0, RSTART, RLENGTH); sub(/^[^:]*: */, "", v); return v + 0
}
function colour(r) { return col[(r - 1) % 10 + 1] }
function px(x) { return ml + (x - x0) / (x1 - x0) * pw }
function py(y) { return pt + (y1 - y) / (y1 - y0) * ph }   # in the current panel (pt, ph, y0, y1)
# Fits the current panel y axis (y0, y1, ys) to [lo, hi].
function yaxis(lo, hi,   d) {
  if (hi <= lo) { d = lo == 0 ? 0.5 : (lo < 0 ? -lo : lo) * 0.05; lo -= d; hi += d }
  ys = nicestep(hi - lo, ph >= 300 ? 7 : 5)
  y0 = fl(lo / ys + 1e-9) * ys; y1 = -fl(-hi / ys + 1e-9) * ys
  if (y1 <= y0) y1 = y0 + ys
}
# Grid, ticks, tick labels, frame and y label of the current panel.
function frame(ylabel, id,   t, f) {
  printf "<clipPath id=\"%s\"><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/></clipPath>\n", id, ml, pt, pw, ph
  printf "<g stroke=\"#e8e8e8\" stroke-width=\"1\">\n"
  for (t = x0; t <= x1 + xs / 1e6; t += xs) printf "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", px(t), pt, px(t), pt + ph
  for (t = y0; t <= y1 + ys / 1e6; t += ys) printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", ml, py(t), ml + pw, py(t)
  printf "</g>\n<g stroke=\"#444\" stroke-width=\"1\">\n"
  for (t = x0; t <= x1 + xs / 1e6; t += xs) printf "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", px(t), pt + ph, px(t), pt + ph + 5
  for (t = y0; t <= y1 + ys / 1e6; t += ys) printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", ml - 5, py(t), ml, py(t)
  printf "</g>\n<g font-size=\"12\" fill=\"#333\">\n"
  f = "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">" xf "</text>\n"
  for (t = x0; t <= x1 + xs / 1e6; t += xs) printf f, px(t), pt + ph + 19, t
  f = "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%." decimals(ys) "f</text>\n"
  for (t = y0; t <= y1 + ys / 1e6; t += ys) printf f, ml - 9, py(t) + 4, (t > -ys / 1e6 && t < ys / 1e6) ? 0 : t
  printf "</g>\n"
  printf "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\" stroke-width=\"1\"/>\n", ml, pt, pw, ph
  printf "<text transform=\"translate(20 %.1f) rotate(-90)\" text-anchor=\"middle\" font-size=\"13\" fill=\"#222\">%s</text>\n", pt + ph / 2, ylabel
}
# A polyline through xs_[1..m], ys_[1..m] of the current panel.
function line(m, c, width, opacity,   i) {
  printf "<polyline stroke=\"%s\" stroke-width=\"%s\" stroke-opacity=\"%s\" points=\"", c, width, opacity
  for (i = 1; i <= m; i++) printf "%s%.1f,%.1f", (i > 1 ? " " : ""), px(lx_[i]), py(ly_[i])
  printf "\"/>\n"
}
# Centred moving average of ly_[1..m] into sm_[1..m] (the window narrowed at the ends).
function average(m,   i, a, b, cs) {
  h1 = int((smooth - 1) / 2); h2 = smooth - 1 - h1; cs[0] = 0
  for (i = 1; i <= m; i++) cs[i] = cs[i - 1] + ly_[i]
  for (i = 1; i <= m; i++) { a = i - h1; b = i + h2; if (a < 1) a = 1; if (b > m) b = m; sm_[i] = (cs[b] - cs[a - 1]) / (b - a + 1) }
}
function upd(x, y) {
  if (!seen++) { xlo = xhi = x; ylo = yhi = y }
  if (x < xlo) xlo = x; if (x > xhi) xhi = x
  if (y < ylo) ylo = y; if (y > yhi) yhi = y
}
FNR == 1 { r++ }
{
  s = num("step"); l = num("loss"); v = num("val_loss")
  if (s == "") next
  if (l != "") { i = ++n[r]; st[r, i] = s; ls[r, i] = l; upd(s, l) }
  if (v != "") { j = ++vn[r]; vs[r, j] = s; vv[r, j] = v; upd(s, v) }
}
END {
  split("#4e79a7 #f28e2b #e15759 #59a14f #b07aa1 #76b7b2 #edc948 #ff9da7 #9c755f #7f7f7f", col, " ")
  ml = 78; mr = 28; mt = 64; mb = 58; pw = W - ml - mr
  gap = 44; ph2 = diff ? int((H - mt - mb - gap) * 0.34) : 0
  ph1 = H - mt - mb - (diff ? gap + ph2 : 0)
  anysm = 0
  for (r = 1; r <= nruns; r++) { dosm[r] = smooth > 1 && n[r] >= 3 * smooth; if (dosm[r]) anysm = 1 }
  # x axis shared by the panels: from 0 (or a nice value below the first step) to a nice value at or above the last
  if (xhi <= xlo) xhi = xlo + 1
  from0 = xlo <= xhi / 5
  xs = nicestep(xhi - (from0 ? 0 : xlo), 8)
  x0 = from0 ? 0 : fl(xlo / xs) * xs; x1 = -fl(-xhi / xs) * xs
  xf = "%." decimals(xs) "f"

  printf "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
  printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n", W, H, W, H
  printf "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n"
  printf "<text x=\"%.1f\" y=\"28\" text-anchor=\"middle\" font-size=\"18\" font-weight=\"bold\" fill=\"#222\">%s</text>\n", W / 2, esc(title)
  sub_ = anysm ? sprintf("faint lines: every step; bold lines: centred %d-step moving average; circles: validation loss", smooth) \
               : "lines: training loss at every logged step; circles: validation loss"
  printf "<text x=\"%.1f\" y=\"48\" text-anchor=\"middle\" font-size=\"12\" fill=\"#666\">%s</text>\n", W / 2, sub_

  # upper panel: the losses
  pt = mt; ph = ph1
  if (ymin_fix != "") ylo = ymin_fix + 0
  if (ymax_fix != "") yhi = ymax_fix + 0
  yaxis(ylo, yhi)
  frame("loss", "plot1")
  printf "<g clip-path=\"url(#plot1)\" fill=\"none\" stroke-linejoin=\"round\" stroke-linecap=\"round\">\n"
  for (r = 1; r <= nruns; r++) {
    for (i = 1; i <= n[r]; i++) { lx_[i] = st[r, i]; ly_[i] = ls[r, i] }
    line(n[r], colour(r), dosm[r] ? 1 : 1.8, dosm[r] ? 0.28 : 0.95)
    if (dosm[r]) { average(n[r]); for (i = 1; i <= n[r]; i++) ly_[i] = sm_[i]; line(n[r], colour(r), 2.2, 0.95) }
  }
  printf "</g>\n<g stroke=\"#ffffff\" stroke-width=\"1.5\">\n"
  for (r = 1; r <= nruns; r++)
    for (j = 1; j <= vn[r]; j++)
      printf "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\"><title>%s step %d: val loss %.4f</title></circle>\n", \
        px(vs[r, j]), py(vv[r, j]), colour(r), esc(ENVIRON["CT_SVG_LABEL_" r]), vs[r, j], vv[r, j]
  printf "</g>\n"

  # legend, top right inside the upper panel (losses fall, so that corner is usually free)
  maxw = length("validation loss")
  for (r = 1; r <= nruns; r++) {
    lab[r] = ENVIRON["CT_SVG_LABEL_" r]
    if (vn[r]) lab[r] = lab[r] sprintf("  (val %.4f)", vv[r, vn[r]])
    if (length(lab[r]) > maxw) maxw = length(lab[r])
  }
  lw = 48 + maxw * 6.7; lh = 12 + 20 * (nruns + 1); gx = ml + pw - lw - 10; gy = pt + 10
  printf "<g font-size=\"12\" fill=\"#222\">\n"
  printf "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" rx=\"4\" fill=\"#ffffff\" fill-opacity=\"0.9\" stroke=\"#cccccc\"/>\n", gx, gy, lw, lh
  for (r = 1; r <= nruns; r++) {
    yy = gy + 20 * r
    printf "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2.5\"/>\n", gx + 10, yy, gx + 34, yy, colour(r)
    printf "<text x=\"%.1f\" y=\"%d\">%s</text>\n", gx + 40, yy + 4, esc(lab[r])
  }
  yy = gy + 20 * (nruns + 1)
  printf "<circle cx=\"%.1f\" cy=\"%d\" r=\"4.5\" fill=\"#888888\" stroke=\"#ffffff\" stroke-width=\"1.5\"/>\n", gx + 22, yy
  printf "<text x=\"%.1f\" y=\"%d\">validation loss</text>\n", gx + 40, yy + 4
  printf "</g>\n"

  # lower panel: loss minus the first run loss at the same step
  if (diff) {
    for (i = 1; i <= n[1]; i++) ref[st[1, i]] = ls[1, i]
    for (j = 1; j <= vn[1]; j++) vref[vs[1, j]] = vv[1, j]
    dlo = dhi = 0
    for (r = 2; r <= nruns; r++) {
      m = 0
      for (i = 1; i <= n[r]; i++) if (st[r, i] in ref) { m++; lx_[m] = st[r, i]; ly_[m] = ls[r, i] - ref[st[r, i]] }
      dm[r] = m; if (dosm[r]) average(m)
      for (i = 1; i <= m; i++) {
        dx[r, i] = lx_[i]; dy[r, i] = ly_[i]; ds[r, i] = dosm[r] ? sm_[i] : ly_[i]
        if (ds[r, i] < dlo) dlo = ds[r, i]; if (ds[r, i] > dhi) dhi = ds[r, i]
      }
      for (j = 1; j <= vn[r]; j++) if (vs[r, j] in vref) {
        d = vv[r, j] - vref[vs[r, j]]; if (d < dlo) dlo = d; if (d > dhi) dhi = d
      }
    }
    pt = mt + ph1 + gap; ph = ph2
    yaxis(dlo, dhi)
    frame("loss − " esc(ENVIRON["CT_SVG_LABEL_1"]), "plot2")
    printf "<g clip-path=\"url(#plot2)\" fill=\"none\" stroke-linejoin=\"round\" stroke-linecap=\"round\">\n"
    printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n", ml, py(0), ml + pw, py(0), colour(1)
    for (r = 2; r <= nruns; r++) {
      for (i = 1; i <= dm[r]; i++) { lx_[i] = dx[r, i]; ly_[i] = dy[r, i] }
      line(dm[r], colour(r), dosm[r] ? 1 : 1.8, dosm[r] ? 0.22 : 0.95)
      if (dosm[r]) { for (i = 1; i <= dm[r]; i++) ly_[i] = ds[r, i]; line(dm[r], colour(r), 2.2, 0.95) }
    }
    printf "</g>\n<g stroke=\"#ffffff\" stroke-width=\"1.5\">\n"
    for (r = 2; r <= nruns; r++)
      for (j = 1; j <= vn[r]; j++) if (vs[r, j] in vref)
        printf "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\"><title>%s step %d: val loss %+.4f against %s</title></circle>\n", \
          px(vs[r, j]), py(vv[r, j] - vref[vs[r, j]]), colour(r), esc(ENVIRON["CT_SVG_LABEL_" r]), vs[r, j], \
          vv[r, j] - vref[vs[r, j]], esc(ENVIRON["CT_SVG_LABEL_1"])
    printf "</g>\n"
    printf "<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"#666\">difference to %s (dashed); above zero: higher loss</text>\n", ml + 8, pt + 16, esc(ENVIRON["CT_SVG_LABEL_1"])
  }
  printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\" fill=\"#222\">step</text>\n", ml + pw / 2, H - 14
  printf "</svg>\n"
}' "${files[@]}" > "$out.tmp"
mv "$out.tmp" "$out"

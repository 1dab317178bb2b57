#!/usr/bin/env bash
# Public functions nothing uses: declared in a header under src/, and named nowhere in src/,
# tests/, bench/ or scripts/ but on that declaration and on its definition. Such a function is
# dead code to remove. One that only tests or benches call is their oracle or hook, and is used.
# A name that only a comment mentions counts as used (the check errs on the side of silence).
#
# usage: scripts/unused_functions.sh [ROOT]   (ROOT holds src/; default: this repository)
# Prints "header: name" per unused function and exits 1, else one summary line, exit 0.
set -u
root=${1:-"$(dirname "$0")/.."}
cd "$root" 2>/dev/null || { echo "unused_functions: no directory $root" >&2; exit 2; }
[ -d src ] || { echo "unused_functions: $root has no src/" >&2; exit 2; }

# Every ct_ name in the code, with how many times it appears.
declare -A uses=()
while read -r n name; do uses[$name]=$n; done < <(
  grep -rhsoE '\bct_[A-Za-z0-9_]+\b' src tests bench scripts \
    --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' --include='*.sh' --include='*.S' |
    LC_ALL=C sort | uniq -c)

# Declarations: a line in a header that starts with a return type and names ct_x( (not static,
# not a macro or typedef, not a function pointer field).
decl_re='^[A-Za-z_][A-Za-z0-9_ ]*[ *](ct_[A-Za-z0-9_]+)\('
unused=0 declared=0
while IFS= read -r header; do
  while IFS= read -r line; do
    [[ $line =~ $decl_re ]] || continue
    name=${BASH_REMATCH[1]}
    case $line in static\ * | typedef\ * | return\ *) continue ;; esac
    declared=$((declared + 1))
    if [ "${uses[$name]:-0}" -le 2 ]; then
      echo "$header: $name"
      unused=$((unused + 1))
    fi
  done <"$header"
done < <(find src -name '*.h' | LC_ALL=C sort)

if [ $unused -gt 0 ]; then
  echo "unused functions: $unused of $declared public functions are named only where declared and defined" >&2
  exit 1
fi
echo "unused functions: none of $declared public functions"

# Assertions for lesson step tests; each prints what it checked, or fails naming it.
# $OUTPUT is the file holding what the program printed (every line labelled [rank N]).

fail() { echo "FAIL: $*"; exit 1; }

# expect REGEX [WHAT]: some line of the output matches.
expect() { grep -qE -- "$1" "$OUTPUT" || fail "${2:-no line matches /$1/}"; echo "ok: ${2:-/$1/}"; }

# expect_none REGEX [WHAT]: no line matches.
expect_none() { ! grep -qE -- "$1" "$OUTPUT" || fail "${2:-a line matches /$1/}: $(grep -E -- "$1" "$OUTPUT" | head -1)"; echo "ok: ${2:-no /$1/}"; }

# expect_count N REGEX [WHAT]: exactly N lines match.
expect_count() {
  local n
  n=$(grep -cE -- "$2" "$OUTPUT" || true)
  [[ "$n" -eq "$1" ]] || fail "${3:-/$2/}: expected $1 lines, found $n"
  echo "ok: ${3:-/$2/} ($n lines)"
}

# field REGEX: the first capture group of the first matching line (sed -E syntax; no '#').
field() { { grep -E -- "$1" "$OUTPUT" || true; } | head -1 | sed -E "s#.*$1.*#\\1#"; }

# fields REGEX: the first capture group of every matching line, one per line.
fields() { { grep -E -- "$1" "$OUTPUT" || true; } | sed -E "s#.*$1.*#\\1#"; }

# results KEY: the value every rank reported for KEY (lessons::report), in rank order, one
# per line; result KEY: the first of them (rank 0's). Nothing when no rank reported it.
results() {
  [[ -f "$LESSON_RESULTS" ]] || return 0
  python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in sorted((r for r in rows if r["key"] == sys.argv[2]), key=lambda r: r["rank"]):
    v = r["value"]
    print(int(v) if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53 else v)' "$LESSON_RESULTS" "$1"
}
result() { results "$1" | head -1; }

# holds "AWK-CONDITION" WHAT [name=value ...]: a numeric condition, e.g. holds "d < 1e-6" "small" d=$d
holds() {
  local cond="$1" what="$2"
  shift 2
  local vars=()
  for kv in "$@"; do
    [[ -n "${kv#*=}" ]] || fail "$what: no value for ${kv%%=*} (the program did not report it)"
    vars+=(-v "$kv")
  done
  awk "${vars[@]}" "BEGIN { exit !($cond) }" || fail "$what ($cond with $*)"
  echo "ok: $what ($*)"
}

#!/usr/bin/env bash
# tier: full (two traces of 0.9 and 2.7 million samples streamed: some seconds each)
# sanitizers: skip (ASan's own memory would hide the growth measured here)
# Bounded memory that stays bounded: `sim --stream --json` keeps the records of its first
# iterations only, so its peak memory does not grow with the trace (the JSON's per-iteration
# arrays grew with it: 120 MB on 10 million samples where 19.3 MB was promised).
. "$(dirname "$0")/lib.sh"

# peak resident memory (VmHWM, kB) of a command, read from /proc while it runs
peak_kb() {
  "$@" >"$TMP/peak.out" 2>&1 &
  local pid=$! hwm=0 v
  while kill -0 $pid 2>/dev/null; do
    v=$(awk '/^VmHWM/ { print $2 }' /proc/$pid/status 2>/dev/null)
    [ -n "$v" ] && [ "$v" -gt "$hwm" ] && hwm=$v
    sleep 0.05
  done
  wait $pid
  echo $hwm
}
"$DPSIM" trace gen -n 900000 --seed 3 -o "$TMP/small.csv" 2>/dev/null
"$DPSIM" trace gen -n 2700000 --seed 3 -o "$TMP/large.csv" 2>/dev/null
small=$(peak_kb "$DPSIM" sim --stream --json --trace "$TMP/small.csv")
cp "$TMP/peak.out" "$TMP/small.json"
large=$(peak_kb "$DPSIM" sim --stream --json --trace "$TMP/large.csv")
cp "$TMP/peak.out" "$TMP/large.json"
check "sim --stream --json finished both and kept 4096 records of the longer run" bash -c \
  "grep -q '\"per_iteration_omitted\"' '$TMP/large.json' && grep -q '\"throughput_tokens_per_s\"' '$TMP/small.json'"
check "its peak memory does not grow with the trace (0.9 M samples: $small kB; 2.7 M: $large kB; both past the 4,096 records kept)" \
  test "$large" -gt 0 -a "$large" -lt $((small + 8192)) # malloc's noise is some MB; keeping every record adds ~16 MB
check "... and stays under 40 MB" test "$large" -lt 40960
finish

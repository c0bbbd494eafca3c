#!/usr/bin/env bash
# End-to-end tests of `dpsim` itself and `dpsim trace` / `dpsim plot lengths`.
. "$(dirname "$0")/lib.sh"

# --- the driver -----------------------------------------------------------------------------------
expect "--help lists every subcommand" 0 "validate" -- "$DPSIM" --help
for sub in trace models cost calibrate plan sim compare sweep plot validate; do
  grep -q "^  $sub " "$TMP/out" || not_ok "--help lists $sub"
done
expect "--version" 0 "^dpsim [0-9]+\.[0-9]+" -- "$DPSIM" --version
expect "no subcommand is a usage error" 2 "usage:" -- "$DPSIM"
expect "unknown subcommand exits 2" 2 "unknown subcommand \"frobnicate\"" -- "$DPSIM" frobnicate
expect "trace --help" 0 "stats" -- "$DPSIM" trace --help
expect "trace gen --help shows defaults" 0 "\[100000\]" -- "$DPSIM" trace gen --help
expect "trace stats --help" 0 "--json" -- "$DPSIM" trace stats --help
expect "trace import --help" 0 "--targets" -- "$DPSIM" trace import --help
expect "unknown option exits 2" 2 "unknown option --bogus" -- "$DPSIM" trace gen --bogus
expect "missing option value exits 2" 2 "needs a value" -- "$DPSIM" trace gen --seed
expect "bad option value exits 2" 2 "--samples \"abc\"" -- "$DPSIM" trace gen --samples abc
expect "unknown mix exits 2" 2 "unknown --mix" -- "$DPSIM" trace gen --mix nope
expect "contradictory uniform range exits 2" 2 "--min" -- "$DPSIM" trace gen --mix uniform --min 9 --max 3

# --- gen: determinism ---------------------------------------------------------------------------
expect "gen writes a file" 0 "wrote 2000 samples" -- "$DPSIM" trace gen -n 2000 --seed 5 -o "$TMP/a.csv"
expect "gen again, same seed" 0 "" -- "$DPSIM" trace gen -n 2000 --seed 5 -o "$TMP/b.csv"
expect "gen, other seed" 0 "" -- "$DPSIM" trace gen -n 2000 --seed 6 -o "$TMP/c.csv"
check "same seed gives identical files" cmp -s "$TMP/a.csv" "$TMP/b.csv"
check "other seed gives another file" bash -c "! cmp -s '$TMP/a.csv' '$TMP/c.csv'"
check "gen has the contract header" bash -c "head -1 '$TMP/a.csv' | grep -qx 'task,input_len,target_len'"
expect "gen to stdout" 0 "^fixed,64,0" -- "$DPSIM" trace gen --mix fixed --len 64 -n 3

# --- stats --------------------------------------------------------------------------------------
expect "stats of the default trace" 0 "samples 100000" -- "$DPSIM" trace stats traces/flanv2-100k.csv
expect "stats --json is JSON" 0 '"p90"' -- "$DPSIM" trace stats --json "$TMP/a.csv"
check "stats --json parses" bash -c "'$DPSIM' trace stats --json '$TMP/a.csv' | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d[\"samples\"]==2000' 2>/dev/null || '$DPSIM' trace stats --json '$TMP/a.csv' | grep -q '\"samples\":\s*2000'"

# --- import ---------------------------------------------------------------------------------------
expect "import CoT lengths (T5)" 0 "imported 33443 samples" -- "$DPSIM" trace import --format cot traces/data/cot_raw_sample_lengths.csv -o "$TMP/cot.csv"
expect "import CoT lengths (GPT-2)" 0 "imported 33443" -- "$DPSIM" trace import --format cot --tokenizer gpt2 traces/data/cot_raw_sample_lengths.csv -o "$TMP/cot2.csv"
check "CoT import keeps the raw columns" bash -c "head -1 '$TMP/cot.csv' | grep -q '^task,input_len,target_len,row,question_chars'"
printf '{"input_seq_len": 12, "target_seq_len": 3, "task_name": "a"}\n{"input_seq_len": 40, "target_seq_len": 9, "task_name": "b"}\n' >"$TMP/f.jsonl"
expect "import JSONL" 0 "imported 2 samples" -- "$DPSIM" trace import "$TMP/f.jsonl" -o "$TMP/f.csv"
check "JSONL → CSV content" bash -c "diff <(printf 'task,input_len,target_len\na,12,3\nb,40,9\n') '$TMP/f.csv'"
printf '{"len": 12, "n": "x"}\n' >"$TMP/g.jsonl"
expect "import JSONL, renamed fields" 0 "imported 1" -- "$DPSIM" trace import --input-field len --task-field n --no-target "$TMP/g.jsonl" -o "$TMP/g.csv"
check "CSV → CSV round trip is byte-identical" bash -c "'$DPSIM' trace import '$TMP/a.csv' -o '$TMP/a2.csv' 2>/dev/null && cmp -s '$TMP/a.csv' '$TMP/a2.csv'"

# --- bad input: FILE:LINE: reason, exit 1, never a signal -----------------------------------------
printf 'task,input_len,target_len\na,5,1\nb,-3,1\n' >"$TMP/neg.csv"
expect "negative length names file and line" 1 "neg.csv:3: input_len \"-3\" is negative" -- "$DPSIM" trace stats "$TMP/neg.csv"
: >"$TMP/empty.csv"
expect "empty file" 1 "empty.csv: file is empty" -- "$DPSIM" trace stats "$TMP/empty.csv"
printf 'task,input_len,target_len\n' >"$TMP/hdr.csv"
expect "header only" 1 "hdr.csv:1: the header has no data rows" -- "$DPSIM" trace stats "$TMP/hdr.csv"
printf 'task,input_len\na,1\n' >"$TMP/miss.csv"
expect "missing column" 1 "miss.csv:1: missing column \"target_len\"" -- "$DPSIM" trace stats "$TMP/miss.csv"
printf '{"input_seq_len": 3, "target_seq_len": 1}\n{"input_seq_len": \n' >"$TMP/bad.jsonl"
expect "malformed JSON line" 1 "bad.jsonl:2: malformed JSON" -- "$DPSIM" trace stats "$TMP/bad.jsonl"
hdr='{"descr": "<i8", "fortran_order": False, "shape": (4, 3)}'
hlen=$(( ${#hdr} + 1 ))
{ printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $hlen)\\x00"; printf '%s\n' "$hdr"; printf '12345678'; } >"$TMP/t.npy"
expect "truncated .npy" 1 "t.npy: .npy data is 8 bytes, the shape \\(4, 3\\) needs 96" -- "$DPSIM" trace stats "$TMP/t.npy"
expect "missing file" 1 "nope.csv: cannot open" -- "$DPSIM" trace stats "$TMP/nope.csv"

# --- plot lengths -------------------------------------------------------------------------------
expect "plot lengths" 0 "wrote" -- "$DPSIM" plot lengths traces/flanv2-100k.csv -o "$TMP/len.png"
check "lengths.png is a PNG of sensible size" is_png "$TMP/len.png" 10000
expect "plot lengths as SVG" 0 "" -- "$DPSIM" plot lengths "$TMP/a.csv" -o "$TMP/len.svg"
check "lengths.svg is SVG" grep -q "<svg" "$TMP/len.svg"
expect "plot to an unknown type" 1 "unknown figure type" -- "$DPSIM" plot lengths "$TMP/a.csv" -o "$TMP/len.gif"
expect "unknown plot kind" 2 "unknown figure kind" -- "$DPSIM" plot pie x
expect "validate without its files is a usage error" 2 "--plan and --measured are required" -- "$DPSIM" validate

finish

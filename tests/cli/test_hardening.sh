#!/usr/bin/env bash
# The red-team classes, each as a catalogue of cases: no input runs a command (gnuplot), no output
# destroys an input or another output, every write failure is an error that leaves the old file,
# readers bound what they buffer, formats are strict, results that would be silently wrong are
# refused. Every refusal exits 1 or 2 naming the file.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_dprun.sh"
G=tests/cli/golden
TWO=$G/two_samples.csv
TINY=(--model gpt-tiny --hw cpu --analytic --trace "$TWO" --global-tokens 128)

# --- 1. no string reaching a figure runs a command ------------------------------------------------
W="$TMP/inj"; mkdir -p "$W"
# every string a figure shows or is written to: quotes, newlines, a backslash, system( and backquotes
EVIL=$'q\'"\\\nsystem(\'touch PWNED\')\n`touch PWNED2`'
cp "$TWO" "$W/trace $EVIL.csv"
pwned() { [ -z "$(find "$W" /tmp/PWNED /tmp/PWNED2 -name 'PWNED*' 2>/dev/null)" ]; }
( cd "$W" && "$OLDPWD/$DPSIM" plot lengths "trace $EVIL.csv" -o "fig $EVIL.png" ) >"$TMP/o" 2>&1
check "plot lengths: a trace name and an output path with quotes, newlines and system( draw, and run nothing" \
  bash -c "$(declare -f pwned); W='$W'; pwned && [ \$(find '$W' -name 'fig*.png' -printf x | wc -c) = 1 ]"
# the shape that broke out of the output path before: close the quote, a command, a comment
BREAK=$'x\'\nsystem(\'touch PWNED\')\n#.png'
( cd "$W" && "$OLDPWD/$DPSIM" plot lengths "$OLDPWD/$TWO" -o "$BREAK" ) >"$TMP/o" 2>&1
check "plot lengths: an output path that closes gnuplot's quote and adds a command runs nothing" \
  bash -c "$(declare -f pwned); W='$W'; pwned && [ \$(find '$W' -name 'x*.png' -size +1k -printf x | wc -c) = 1 ]"
( cd "$W" && "$OLDPWD/$DPSIM" compare "${TINY[@]/#$TWO/$OLDPWD/$TWO}" --out "out $EVIL" ) >"$TMP/o" 2>&1
check "compare: a figure folder with quotes, newlines and system( draws three figures, and runs nothing" \
  bash -c "$(declare -f pwned); W='$W'; pwned && [ \$(find '$W' -path '*out*' -name '*.png' -printf x | wc -c) = 3 ]"
# a sweep CSV whose cells (series names) carry the same
CELL=${EVIL//\"/\"\"} # a quote inside a quoted CSV field is doubled
printf 'pp,batching,throughput_tokens_per_s\n1,"a%s",10\n2,"a%s",20\n' "$CELL" "$CELL" >"$W/sweep.csv"
( cd "$W" && "$OLDPWD/$DPSIM" plot sweep sweep.csv --x pp --y throughput_tokens_per_s --series batching \
    --title "$EVIL" --xlabel "$EVIL" --ylabel "$EVIL" -o "sweep $EVIL.svg" ) >"$TMP/o" 2>&1
check "plot sweep: CSV cells, title and labels with quotes, newlines and system( draw, and run nothing" \
  bash -c "$(declare -f pwned); W='$W'; pwned && [ \$(find '$W' -name 'sweep*.svg' -printf x | wc -c) = 1 ]"
expect "a figure that cannot be written is an error, and nothing lands on stdout" 1 "cannot create|write failed" -- \
  "$DPSIM" plot lengths "$TWO" -o "$TMP/no/such/dir/fig.png"
check "... stdout stayed empty" bash -c "'$DPSIM' plot lengths '$TWO' -o '$TMP/no/such/dir/fig.png' 2>/dev/null | wc -c | grep -qx 0"

# --- 2. no output destroys an input or another output ---------------------------------------------
cp $G/plan_4ranks.json "$TMP/p.json"; ln -sf "$TMP/p.json" "$TMP/plink.json"
expect "sim --plan P --timeline P is refused, P intact" 2 "--timeline .*p.json is the same file as the input --plan" -- \
  "$DPSIM" sim --plan "$TMP/p.json" --timeline "$TMP/p.json"
check "... the plan still reads" "$DPSIM" sim --plan "$TMP/p.json"
expect "through a symbolic link too" 2 "same file as the input --plan" -- "$DPSIM" sim --plan "$TMP/plink.json" --chrome "$TMP/p.json"
expect "--timeline X --chrome X is refused" 2 "are the same file: two outputs would overwrite each other" -- \
  "$DPSIM" sim --plan "$TMP/p.json" --timeline "$TMP/x" --chrome "$TMP/./x"
cp "$TWO" "$TMP/t.csv"
expect "plan --trace T -o T is refused" 2 "-o .*t.csv is the same file as the input --trace" -- "$DPSIM" plan "${TINY[@]}" --trace "$TMP/t.csv" -o "$TMP/t.csv"
mkdir -p "$TMP/cmp"; cp "$TWO" "$TMP/cmp/memory.png"
expect "compare: a figure over the trace is refused" 2 "--out .*memory.png is the same file as the input --trace" -- \
  "$DPSIM" compare "${TINY[@]}" --trace "$TMP/cmp/memory.png" --out "$TMP/cmp"
expect "sweep -o onto the trace is refused" 2 "-o .*t.csv is the same file as the input --trace" -- \
  "$DPSIM" sweep "${TINY[@]}" --trace "$TMP/t.csv" --grid pp=1 -o "$TMP/t.csv"
check "... the trace is intact" cmp -s "$TMP/t.csv" "$TWO"
cp "$TWO" "$TMP/s.config"
expect "sweep -o S with the trace at S.config (its configuration's path) is refused" 2 \
  "-o's configuration .*s.config is the same file as the input --trace" -- \
  "$DPSIM" sweep "${TINY[@]}" --trace "$TMP/s.config" --grid pp=1 -o "$TMP/s"
check "... the trace is intact, no ranking written" bash -c "cmp -s '$TMP/s.config' '$TWO' && [ ! -e '$TMP/s' ]"
expect "... and tune's the same" 2 "-o's configuration .*s.config is the same file as the input --trace" -- \
  "$DPSIM" tune "${TINY[@]}" --trace "$TMP/s.config" -o "$TMP/s"
expect "trace import IN -o IN is refused" 2 "is the same file as the input FILE" -- "$DPSIM" trace import "$TMP/t.csv" -o "$TMP/t.csv"
expect "dprun --out equal to --plan is refused" 2 "same file as the input --plan" -- "$DPRUN" --plan "$TMP/p.json" --out "$TMP/p.json"
check "... the plan is intact" cmp -s "$TMP/p.json" $G/plan_4ranks.json
expect "validate --plot onto the measured timeline is refused" 2 "same file as the input --measured" -- \
  "$DPSIM" validate --plan "$TMP/p.json" --measured "$TMP/t.csv" --plot "$TMP/t.csv"

# --- 3. a write that fails is an error and leaves the old file -------------------------------------
echo "old" >"$TMP/keep.csv"
# a file-size limit makes writes fail as a full disk does (EFBIG); SIGXFSZ ignored so write returns
expect "trace gen: a failing write exits 1 naming the file" 1 "keep.csv: write failed" -- \
  bash -c "trap '' XFSZ; ulimit -f 16; exec '$DPSIM' trace gen --samples 20000 -o '$TMP/keep.csv'"
check "... and the old file is left as it was (no half file)" bash -c "[ \"\$(cat '$TMP/keep.csv')\" = old ] && ! ls '$TMP'/keep.csv.tmp-* 2>/dev/null"
expect "sweep: a failing write exits 1 naming the file" 1 "sw.csv: write failed" -- \
  bash -c "trap '' XFSZ; ulimit -f 1; exec '$DPSIM' sweep ${TINY[*]} --grid 'pp=1,2 mbs=1,2,3,4,5,6,7,8' -o '$TMP/sw.csv'"
check "... the file holds whole rows only, and a resume continues from them" \
  bash -c "sed 's/\"[^\"]*\"/q/g' '$TMP/sw.csv' | awk -F, 'NR > 1 && NF != 20 { exit 1 }' && '$DPSIM' sweep ${TINY[*]} --grid 'pp=1,2 mbs=1,2,3,4,5,6,7,8' -o '$TMP/sw.csv' && [ \$(wc -l < '$TMP/sw.csv') = 17 ]"
expect "plan -o to a full device is an error" 1 "write failed" -- "$DPSIM" plan "${TINY[@]}" -o /dev/full
( flock 9; sleep 10 ) 9>>"$TMP/locked.csv" &
holder=$!
for _ in $(seq 1 50); do flock -n "$TMP/locked.csv" true 2>/dev/null || break; sleep 0.05; done
expect "two sweeps on one file: the second is refused" 1 "another sweep is writing this file" -- \
  "$DPSIM" sweep "${TINY[@]}" --grid 'pp=1,2' -o "$TMP/locked.csv"
pkill -P "$holder" 2>/dev/null; kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
# a grid value with a double quote is a quoted cell, read back as its point on resume
cp "$TWO" "$TMP/q\"t.csv"
"$DPSIM" sweep "${TINY[@]}" --grid "trace=$TMP/q\"t.csv,$TWO pp=1,2" -o "$TMP/quoted.csv" >/dev/null 2>&1
check "sweep: a grid value with a quote is written as a quoted CSV cell" grep -q '^"[^,]*q""t.csv",1,' "$TMP/quoted.csv"
expect "... and a resume finds every point done (it reads the cell back)" 0 "4 points, 4 already in" -- \
  "$DPSIM" sweep "${TINY[@]}" --grid "trace=$TMP/q\"t.csv,$TWO pp=1,2" -o "$TMP/quoted.csv"
# a configuration that cannot be written leaves no header-only CSV to block the next run
mkdir -p "$TMP/cf.csv.config"
expect "sweep: OUT.config that cannot be written is an error" 1 "cf.csv.config" -- \
  "$DPSIM" sweep "${TINY[@]}" --grid 'pp=1,2' -o "$TMP/cf.csv"
rmdir "$TMP/cf.csv.config"
expect "... the CSV was left empty, so the next run starts afresh" 0 "2 points, 0 already in" -- \
  "$DPSIM" sweep "${TINY[@]}" --grid 'pp=1,2' -o "$TMP/cf.csv"
# a point that cannot be run (a file that cannot be read) is no result: no row, exit 1, and the
# next run of the same command runs it
expect "sweep: a point whose trace cannot be read has no row and the sweep exits 1" 1 \
  "1 point could not be run and has no row .*later.csv: cannot open" -- \
  "$DPSIM" sweep "${TINY[@]}" --grid "trace=$TWO,$TMP/later.csv" -o "$TMP/io.csv"
check "... the other point's row is there, not that one's" bash -c \
  "[ \$(wc -l < '$TMP/io.csv') = 2 ] && ! grep -q later.csv '$TMP/io.csv'"
cp "$TWO" "$TMP/later.csv"
expect "... the same command then runs it" 0 "2 points, 1 already in" -- \
  "$DPSIM" sweep "${TINY[@]}" --grid "trace=$TWO,$TMP/later.csv" -o "$TMP/io.csv"

# --- 4. readers bound what they buffer --------------------------------------------------------------
expect "a trace CSV with an endless line" 1 "line longer than 64 MiB" -- timeout 60 "$DPSIM" trace stats --format csv /dev/zero
expect "a profile CSV with an endless line" 1 "line longer than 64 MiB" -- timeout 60 "$DPSIM" cost --model gpt-tiny --profile /dev/zero --mbs 1 --seqlen 16
expect "a measured timeline with an endless line" 1 "line longer than 64 MiB" -- timeout 60 "$DPSIM" validate --plan "$TMP/p.json" --measured /dev/zero
expect "a JSONL trace with an endless line" 1 "line longer than 64 MiB" -- timeout 60 "$DPSIM" trace stats --format jsonl /dev/zero

# --- 5. strict formats --------------------------------------------------------------------------------
printf '{"input_seq_len": 3, "target_seq_len": 1} {"input_seq_len": 4, "target_seq_len": 1}\n' >"$TMP/two.jsonl"
expect "JSONL: two objects on a line" 1 "two.jsonl:1: text after the object" -- "$DPSIM" trace stats "$TMP/two.jsonl"
printf '{"input_seq_len": 3, "target_seq_len": 1} ]\n' >"$TMP/junk.jsonl"
expect "JSONL: trailing garbage" 1 "junk.jsonl:1: text after the object" -- "$DPSIM" trace stats "$TMP/junk.jsonl"
printf '{"input_seq_len": 3, "input_seq_len": 9, "target_seq_len": 1}\n' >"$TMP/dupk.jsonl"
expect "JSONL: a repeated key" 1 "dupk.jsonl:1: key \"input_seq_len\" appears twice" -- "$DPSIM" trace stats "$TMP/dupk.jsonl"
sed 's/"pp": 4/"pp": 4, "pp": 2/' $G/plan_4ranks.json >"$TMP/dup.json"
expect "plan JSON: a repeated key" 1 "dup.json: key \"pp\" appears twice" -- "$DPSIM" sim --plan "$TMP/dup.json"
printf '{"name": "gpt-a\\u0000b", "num_layers": 2, "hidden_size": 64, "num_attn_heads": 4}\n' >"$TMP/nul.json"
expect "model JSON: a string with \\u0000" 1 "nul.json:1: a string holds" -- "$DPSIM" models --show "$TMP/nul.json"
expect "sweep: a boolean other than true/false" 2 "\"banana\" is not true or false" -- "$DPSIM" sweep "${TINY[@]}" --grid 'analytic=banana' -o "$TMP/b.csv"
expect "sweep: a grid of 2^40 points" 2 "more than 1000000 points" -- "$DPSIM" sweep "${TINY[@]}" \
  --grid "pp=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 dp=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 mbs=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 zero=0,1,2,3,0,1,2,3,0,1,2,3,0,1,2,3 tp=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 chunks=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 mb-tokens=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 global-tokens=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 max-seqlen=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 iterations=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16" -o "$TMP/g.csv"
printf 'task,input_len,target_len\na,5,1\n' >"$TMP/nt.csv"
expect "trace import --no-target writes a trace dpsim reads back" 0 "samples 1" -- \
  bash -c "'$DPSIM' trace import --no-target '$TMP/nt.csv' -o '$TMP/nt_out.csv' && '$DPSIM' trace stats '$TMP/nt_out.csv'"

# --- 6. results that would be silently wrong ------------------------------------------------------------
"$DPSIM" plan "${TINY[@]}" --pp 2 -o "$TMP/a.json" >/dev/null 2>&1
"$DPSIM" plan "${TINY[@]}" --pp 2 --batching padding -o "$TMP/b.json" >/dev/null 2>&1
timeout 120 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/a.json" --out "$TMP/ma.csv" >"$TMP/r0.out" 2>&1
expect "validate: a measured timeline of another plan is refused" 1 "plan_hash .* is not this plan's" -- \
  "$DPSIM" validate --plan "$TMP/b.json" --measured "$TMP/ma.csv"
{ head -1 "$TMP/ma.csv"; tail -n +2 "$TMP/ma.csv" | head -1 | awk -F, -v OFS=, '{ $2 = 7; print }'; } >"$TMP/unk.csv"
expect "validate: a row with an unknown stage is refused" 1 "unk.csv:2: no such op in the plan" -- \
  "$DPSIM" validate --plan "$TMP/a.json" --measured "$TMP/unk.csv"
timeout 120 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/a.json" --out "$TMP/mw.csv" --warmup 2 >"$TMP/r2.out" 2>&1
check "dprun: warm-up runs do not change the gradient norm" bash -c "[ -n \"\$(grep -Eo 'gradient norm [0-9.e+-]+' '$TMP/r0.out')\" ] && [ \"\$(grep -Eo 'gradient norm [0-9.e+-]+' '$TMP/r0.out')\" = \"\$(grep -Eo 'gradient norm [0-9.e+-]+' '$TMP/r2.out')\" ]"
expect "sim --plan with --zero is refused, not ignored" 2 "--zero cannot apply with --plan" -- "$DPSIM" sim --plan "$TMP/a.json" --zero 3
expect "sim --plan with --dp is refused, not ignored" 2 "--dp cannot apply with --plan" -- "$DPSIM" sim --plan "$TMP/a.json" --dp 2

# --- 7. sanitizer classes and messages ------------------------------------------------------------------
expect "a replica with no micro-batch (dp 32) simulates" 0 "timeline hash" -- "$DPSIM" sim --dp 32 --global-tokens 16384 --iterations 1
printf '{"name": "t5-huge", "arch": "t5", "num_layers": 1048576, "num_decoder_layers": 1048576, "d_model": 16777216, "num_heads": 65536, "d_kv": 1048576, "d_ff": 67108864, "vocab_size": 16777216}\n' >"$TMP/huge.json"
expect "a T5 spec whose fields are in range but whose size overflows" 2 "huge.json: .* parameters, more than" -- "$DPSIM" cost --model "$TMP/huge.json" --analytic --mbs 1 --seqlen 16 --dec-seqlen 16
expect "a model file's error is reported as the model's" 1 "huge.json: .* parameters" -- "$DPSIM" models --show "$TMP/huge.json"
D200=$(printf 'd%.0s' $(seq 1 200)); LONG="$D200/$D200/$D200/$D200/$D200/$D200/$D200"
expect "a message longer than the buffer keeps its reason" 1 " \\.\\.\\. .*\\.csv: cannot open: No such file or directory" -- "$DPSIM" trace stats "$TMP/$LONG.csv"
# --- grids: empty values, one value twice, the same value written another way on resume -----------
for g in 'pp=,' 'pp=2,,4' 'pp=' ; do
  expect "grid \"$g\" is refused, not divided by zero" 2 "empty|is not KEY=V1,V2" -- "$DPSIM" sweep --grid "$g" -o "$TMP/g.csv" --iterations 1
done
expect "a grid value listed twice is refused (2 and 02)" 2 "lists one value twice \\(\"2\" and \"02\"\\)" -- \
  "$DPSIM" sweep --grid 'pp=2,02' -o "$TMP/g.csv" --iterations 1
expect "... and true and 1 are one value" 2 "lists one value twice" -- \
  "$DPSIM" sweep --grid 'flash-attention=true,1' -o "$TMP/g.csv" --iterations 1
"$DPSIM" sweep --grid 'flash-attention=1,0' -o "$TMP/gr.csv" --iterations 1 >/dev/null 2>&1
expect "a resume writing 1,0 as true,false finds its rows done" 0 "2 points, 2 already in" -- \
  "$DPSIM" sweep --grid 'flash-attention=true,false' -o "$TMP/gr.csv" --iterations 1
check "... and adds none" test "$(wc -l <"$TMP/gr.csv")" -eq 3

# --- op times beyond the simulator's clock: said of the cost, before any plan ---------------------
"$DPSIM" models --show p4d 2>/dev/null | sed 's/"peak_tflops":[[:space:]]*312/"peak_tflops": 1e-3/; s/"hbm_gbps":[[:space:]]*1555/"hbm_gbps": 1e-3/' >"$TMP/slow.json"
for b in dynamic packing token auto; do
  expect "a valid hardware JSON of near-zero rates ($b): the cost named, no plan rule" 1 "costs .* beyond the simulator's range of 1e\\+07: the cost model's rates are implausible" -- \
    "$DPSIM" sim --hw "$TMP/slow.json" --analytic --iterations 1 --batching $b
done

# --- one document on stdout ----------------------------------------------------------------------
expect "--timeline - --chrome - is refused (they would interleave)" 2 "--timeline - and --chrome - both write to stdout" -- \
  "$DPSIM" sim --iterations 1 --timeline - --chrome -
expect "... and --timeline - --json" 2 "--timeline - and --json - both write to stdout" -- "$DPSIM" sim --iterations 1 --timeline - --json
"$DPSIM" sim --iterations 1 --timeline - >"$TMP/tl.csv" 2>"$TMP/tl.err"
check "--timeline - alone: stdout is the CSV, the summary goes to stderr" bash -c \
  "head -1 '$TMP/tl.csv' | grep -q '^iteration,stage,op' && ! grep -q 'timeline hash' '$TMP/tl.csv' && grep -q 'timeline hash' '$TMP/tl.err'"

# --- imports: an expert count that is no count, heads that do not split the width ------------------
for v in '"8"' '[8]' 'true' '-8'; do
  printf '{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"num_attention_heads":32,"num_key_value_heads":8,"num_hidden_layers":32,"intermediate_size":14336,"vocab_size":32000,"num_local_experts":%s}' "$v" >"$TMP/moe.json"
  expect "an expert count of $v is refused, not imported as dense" 1 'field "num_local_experts" must be a whole number of experts' -- "$DPSIM" models --show "$TMP/moe.json"
done
printf '{"architectures":["MixtralForCausalLM"],"hidden_size":4096,"num_attention_heads":32,"num_hidden_layers":32,"intermediate_size":14336,"vocab_size":32000}' >"$TMP/moe.json"
expect "a Mixtral architecture without an expert count is still experts" 1 "a mixture-of-experts model \\(MixtralForCausalLM\\)" -- "$DPSIM" models --show "$TMP/moe.json"
printf '{"model_type":"gpt2","n_embd":770,"n_head":12,"n_layer":12,"n_positions":1024,"vocab_size":50257}' >"$TMP/g2.json"
expect "a GPT-2 config whose heads do not split the width" 1 'field "n_embd" 770 is not a multiple of field "n_head" 12' -- "$DPSIM" models --show "$TMP/g2.json"

# --- validate: a timeline that is not one whole run of the plan ------------------------------------
"$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 2 --trace tests/cli/golden/two_samples.csv --global-tokens 128 -o "$TMP/vp.json" >/dev/null 2>&1
"$DPSIM" sim --plan "$TMP/vp.json" --timeline "$TMP/vt.csv" >/dev/null 2>&1
expect "validate takes the simulator's own timeline (stage-wide rows of mb -1 too)" 0 "mean absolute error" -- \
  "$DPSIM" validate --plan "$TMP/vp.json" --measured "$TMP/vt.csv"
awk 'BEGIN { FS = OFS = "," } NR == 1 { print; next } { $5 = "0.000"; $6 = "0.000"; print }' "$TMP/vt.csv" >"$TMP/vz.csv"
expect "... refuses one whose ops all take no time (was inf%)" 1 "every compute op takes 0 us" -- \
  "$DPSIM" validate --plan "$TMP/vp.json" --measured "$TMP/vz.csv"
(cat "$TMP/vt.csv"; grep -v '^iteration' "$TMP/vt.csv") >"$TMP/vd.csv"
expect "... one with every row twice" 1 "appears twice in run 0" -- "$DPSIM" validate --plan "$TMP/vp.json" --measured "$TMP/vd.csv"
grep -v '^0,0,F,0,' "$TMP/vt.csv" >"$TMP/vm.csv"
expect "... and one that lacks an op, naming it" 1 "lacks iteration 0, stage 0, replica 0, F of micro-batch 0" -- \
  "$DPSIM" validate --plan "$TMP/vp.json" --measured "$TMP/vm.csv"

# --- plans that mean what they say: every schedule's plan replays to its own timeline --------------
for s in gpipe 1f1b adaptive zb1; do
  "$DPSIM" plan --schedule $s --iterations 3 -o "$TMP/rt_$s.json" >/dev/null 2>&1
  a=$("$DPSIM" sim --schedule $s --iterations 3 --json 2>/dev/null | grep timeline_hash)
  b=$("$DPSIM" sim --plan "$TMP/rt_$s.json" --json 2>/dev/null | grep timeline_hash)
  check "a $s plan file replays to the timeline its run made (it was 1 ns off for zb1)" test -n "$a" -a "$a" = "$b"
done
expect "a method listed twice is refused, not ranked twice" 2 '--batchings names "packing" twice' -- "$DPSIM" tune --gpus 2 --batchings packing,packing
expect "tune -o - is refused (it writes a ranking file as it goes, and its configuration beside it)" 2 "tune writes its ranking to a file" -- "$DPSIM" tune --gpus 2 -o -
expect "... and -o /dev/null too (never unlinked)" 2 "tune writes its ranking to a file" -- "$DPSIM" tune --gpus 2 -o /dev/null
expect "... in compare too" 2 '--schedules names "1f1b" twice' -- "$DPSIM" compare --schedules 1f1b,1f1b --no-figures

# --- --trace - is read once for every worker of a sweep --------------------------------------------
"$DPSIM" trace gen -n 3000 --seed 2 -o "$TMP/tg.csv" 2>/dev/null
"$DPSIM" sweep --grid 'pp=4,8' --trace - -o "$TMP/sw_stdin.csv" --iterations 1 --jobs 2 <"$TMP/tg.csv" >/dev/null 2>&1
check "sweep --trace -: every point read the whole trace (it was read once per worker)" bash -c \
  "[ \$(grep -c '^[48],[1-9]' '$TMP/sw_stdin.csv') -eq 2 ] && ! grep -q 'missing column' '$TMP/sw_stdin.csv'"
expect "... and a rerun on the same stdin resumes it (its config names the trace by content)" 0 "" -- \
  bash -c "'$DPSIM' sweep --grid 'pp=4,8' --trace - -o '$TMP/sw_stdin.csv' --iterations 1 <'$TMP/tg.csv'"
"$DPSIM" trace gen -n 3000 --seed 3 -o "$TMP/tg3.csv" 2>/dev/null
expect "... another trace on stdin is refused" 1 "stdin_trace_hash" -- \
  bash -c "'$DPSIM' sweep --grid 'pp=4,8' --trace - -o '$TMP/sw_stdin.csv' --iterations 1 <'$TMP/tg3.csv'"


# --- rows that do not fit carry no throughput (study_result_fits: one rule for every report) ----
"$DPSIM" compare "${TINY[@]}" --mem-limit 100 --no-figures --json >"$TMP/oom.json" 2>/dev/null
check "compare --json: an out-of-memory row is not feasible and has no throughput" python3 -c "
import json, sys
rows = json.load(open('$TMP/oom.json'))['rows']
bad = [r for r in rows if r.get('oom') and (r['feasible'] or r['throughput_tokens_per_s'] or r['mfu'])]
sys.exit(1 if bad or not any(r.get('oom') for r in rows) else 0)"
expect "compare's table says OOM in place of a throughput" 0 "^packing +1f1b +OOM +- " -- \
  "$DPSIM" compare "${TINY[@]}" --mem-limit 100 --no-figures
"$DPSIM" sweep "${TINY[@]}" --grid 'mem-limit=100,4000 batching=packing,padding' -o "$TMP/oom.csv" >/dev/null 2>&1
check "sweep: a row with oom=1 has feasible=0 and throughput 0 (and the fitting rows do not)" awk -F, '
  NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
  $c["oom"] == 1 { n++; if ($c["feasible"] != 0 || $c["throughput_tokens_per_s"] + 0 != 0 || $c["mfu"] + 0 != 0) bad = 1 }
  $c["oom"] == 0 && $c["feasible"] == 1 { fit++ }
  END { exit bad || !n || !fit }' "$TMP/oom.csv"
# a worker's error reply is read as that point's error, not as a dead worker (one writer, one reader)
printf '{"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 96, "num_attention_heads": 6, "intermediate_size": 192, "vocab_size": 512}' >"$TMP/h6.json"
# (a tp the heads refuse is left out of the space; the all-to-all form's tp x cp is a point's own)
"$DPSIM" tune --model "$TMP/h6.json" --hw cpu --analytic --trace "$TWO" --global-tokens 128 --gpus 4 \
  --cp 2 --cp-kind all-to-all --batchings packing --schedules 1f1b -q -o "$TMP/h6.csv" >/dev/null 2>&1
check "tune: a tp x cp the all-to-all form refuses is that row's reason, no worker died" bash -c \
  "grep -q 'tp x cp = 4 GPUs whole heads, and h6 has 6 heads' '$TMP/h6.csv' && ! grep -q 'worker died' '$TMP/h6.csv'"
check "tune: no row that does not fit carries a throughput" awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; if (!c["feasible"]) exit 1 }
  NR > 1 && $c["feasible"] == 0 && $c["throughput_tokens_per_s"] + 0 != 0 { exit 1 }' "$TMP/h6.csv"

# A: the layout's padding within the model's context: --cp 3 pads every sequence to a multiple of
# 2 x 3 (with the default 8: 24), and 131,072 tokens padded so pass Llama-3.1-8B's context
expect "cp 3 at the model's whole context is refused, naming the padded length" 2 \
  "padded to a multiple of 24 \\(131088\\) is longer than the 131072 tokens" -- \
  "$DPSIM" plan --model llama3.1-8b --hw dgx-h100 --cp 3 --pp 1 --max-seqlen 131072 --global-tokens 262144 \
  --iterations 1 -o "$TMP/cp3.json"
expect "... with the longest that fits as the hint" 2 "^hint: --max-seqlen 131064 or less" -- \
  "$DPSIM" plan --model llama3.1-8b --hw dgx-h100 --cp 3 --pp 1 --max-seqlen 131072 --global-tokens 262144 \
  --iterations 1 -o "$TMP/cp3.json"
# A: tp needs whole heads and an equal share of the MLP width of the planner as of dprun
"$DPSIM" models --show gpt-tiny 2>/dev/null | sed 's/"ffn_hidden_size":[^,]*/"ffn_hidden_size": 1025/' >"$TMP/ffn.json"
expect "a tp that does not divide the MLP width is refused by the planner" 2 "tp 2 does not divide the 1025 MLP width" -- \
  "$DPSIM" plan --model "$TMP/ffn.json" --hw cpu --analytic --tp 2 --pp 2 --max-seqlen 64 --global-tokens 256 \
  --iterations 1 -o "$TMP/ffn_plan.json"
# G: a name that holds markup cannot break the page's data block: every '<' in it is \u003c
"$DPSIM" models --show gpt-tiny 2>/dev/null | sed 's|"name":[^,]*|"name": "x</script><!--<script>y"|' >"$TMP/markup.json"
expect "sim --html with a model named with markup" 0 "wrote" -- \
  "$DPSIM" sim --model "$TMP/markup.json" --hw cpu --analytic --pp 2 --max-seqlen 64 --global-tokens 256 \
  --iterations 1 --html "$TMP/markup.html"
check "... its data block holds no '<' and the name escaped" bash -c \
  "grep 'id=\"dpsim-data\">' '$TMP/markup.html' | sed 's/^.*id=\"dpsim-data\">//; s/<\\/script>.*$//' | \
   { ! grep -q '<'; } && grep -q 'x\\\\u003c/script\\\\u003e\\\\u003c!--' '$TMP/markup.html'"
# G: plot timeline draws one run: a measured timeline's repeat 1 is not overlaid on repeat 0 (the
# figure of both repeats is that of repeat 0's rows alone), and --repeat 1 draws the other
mkdir -p "$TMP/a" "$TMP/b"
printf 'iteration,stage,op,mb,start_us,end_us,replica,chunk,repeat\n0,0,F,0,0,100,0,0,0\n0,0,B,0,100,300,0,0,0\n0,0,F,0,1000,1100,0,0,1\n0,0,B,0,1100,1400,0,0,1\n' >"$TMP/a/t.csv"
head -3 "$TMP/a/t.csv" >"$TMP/b/t.csv"
"$DPSIM" plot timeline "$TMP/a/t.csv" -o "$TMP/a/t.svg" >/dev/null 2>&1
"$DPSIM" plot timeline "$TMP/b/t.csv" -o "$TMP/b/t.svg" >/dev/null 2>&1
check "plot timeline: one repeat drawn, not every repeat overlaid" bash -c \
  "[ -s '$TMP/a/t.svg' ] && diff -q <(sed 's#$TMP/[ab]/##g' '$TMP/a/t.svg') <(sed 's#$TMP/[ab]/##g' '$TMP/b/t.svg')"
expect "... --repeat 1 draws the other, and says so" 0 "wrote" -- \
  "$DPSIM" plot timeline "$TMP/a/t.csv" --repeat 1 -o "$TMP/a/t1.svg"
check "... a figure of its own" bash -c "grep -q 'repeat 1' '$TMP/a/t1.svg' && ! cmp -s '$TMP/a/t.svg' '$TMP/a/t1.svg'"
# D: --keep-going that leaves every iteration out has no answer: plan writes nothing, sim and its
# JSON do not report a result
KG="--model llama3-8b --hw h100 --pp 4 --tp 2 --zero 1 --max-seqlen 8192 --global-tokens 65536 --mem-limit 20600 --keep-going --iterations 2"
# shellcheck disable=SC2086
expect "plan --keep-going with every iteration left out is refused" 1 "every iteration was left out" -- \
  "$DPSIM" plan $KG -o "$TMP/kg.json"
check "... writing no plan" test ! -e "$TMP/kg.json"
# shellcheck disable=SC2086
expect "... and sim --json too" 1 "every iteration was left out" -- "$DPSIM" sim $KG --json
# --- a red team's findings (2026-12-07, twenty-first session) -----------------------------------
# a result printed to a standard output that cannot take it is a lost result: exit 1, saying so
expect "sim > /dev/full exits 1 naming standard output" 1 "standard output: write failed" -- \
  bash -c "exec '$DPSIM' sim ${TINY[*]} >/dev/full"
expect "models > /dev/full too" 1 "standard output: write failed" -- bash -c "exec '$DPSIM' models >/dev/full"
# a profile whose layer takes no time, or past what a plan may hold, is refused at its line
P=models/profiles/a100_gpt_6.7b_profile.csv
awk -F, -v OFS=, 'NR > 1 && $2 == "none" && $4 == "bwd_ms" { $8 = 0 } { print }' $P >"$TMP/z_profile.csv"
cp models/profiles/a100_gpt_6.7b_params.csv "$TMP/z_params.csv"
expect "a profile with a backward of 0 ms is refused naming the line" 1 "z_profile.csv:[0-9]+: bwd_ms \"0\" is not a time" -- \
  "$DPSIM" sim --profile "$TMP/z_profile.csv" --trace "$TWO" --iterations 1
awk -F, -v OFS=, 'NR == 2 { $8 = "1e308" } { print }' $P >"$TMP/h_profile.csv"
cp models/profiles/a100_gpt_6.7b_params.csv "$TMP/h_params.csv"
expect "... and one of 1e308" 1 "h_profile.csv:2: .* \"1e308\" is beyond" -- \
  "$DPSIM" sim --profile "$TMP/h_profile.csv" --trace "$TWO" --iterations 1
# a fit that cannot describe its own points is no fit: refused, nothing written
awk -F, -v OFS=, 'NR > 1 && $2 == "none" && $3 == "encoder" && $4 == "fwd_ms" { $8 = "1e-9" } { print }' $P >"$TMP/t_profile.csv"
cp models/profiles/a100_gpt_6.7b_params.csv "$TMP/t_params.csv"
expect "calibrate: a fit erring by 1e10% is refused" 1 "cannot describe this profile" -- \
  "$DPSIM" calibrate --profile "$TMP/t_profile.csv" -o "$TMP/t_fit.json"
check "... and not written" test ! -e "$TMP/t_fit.json"
# a sweep whose grid names no model, or a trace that is no trace, is no result
expect "sweep: a grid model that names nothing is refused before any point runs" 2 "grid key model: unknown model \"nosuch\"" -- \
  "$DPSIM" sweep "${TINY[@]}" --grid 'model=gpt-tiny,nosuch' -o "$TMP/gm.csv"
check "... no output written" test ! -s "$TMP/gm.csv"
printf 'root:x:0:0:root:/root:/bin/bash\n' >"$TMP/passwd"
expect "sweep: a grid trace that is no trace has no row, and the sweep exits 1" 1 "could not be run .*passwd:1: missing column" -- \
  "$DPSIM" sweep "${TINY[@]}" --grid "trace=$TMP/passwd" -o "$TMP/gt.csv"
# measured times off by orders of magnitude are no measurement, in validate and plot timeline alike
printf 'iteration,stage,op,mb,start_us,end_us\n0,0,F,0,0,1e308\n' >"$TMP/tl_huge.csv"
expect "plot timeline: an op ending at 1e308 us is refused naming the line" 1 "tl_huge.csv:2: start_us 0 / end_us 1e308" -- \
  "$DPSIM" plot timeline "$TMP/tl_huge.csv" -o "$TMP/tl.svg"

# a memory limit above the GPU's is a what-if, asked for by name; a cluster JSON cannot hold one
expect "--mem-limit above the GPU's memory is refused" 2 "--mem-limit 200000 MB is more than a100-40gb's" -- \
  "$DPSIM" sim --iterations 1 --mem-limit 200000
expect "... on a plan's replay too" 1 "--mem-limit 200000 MB is more than" -- \
  "$DPSIM" sim --plan $G/plan_4ranks.json --mem-limit 200000
expect "... and runs as a what-if with --allow-oversubscribe" 0 "out of memory +no" -- \
  "$DPSIM" sim --iterations 1 --pp 1 --mem-limit 200000 --allow-oversubscribe
printf '{"name": "x", "gpu": {"peak_tflops": 312, "hbm_gbps": 1555, "mem_mb": 1}, "intra_gbit": 2400, "mem_limit_mb": 36000}\n' >"$TMP/mem.json"
expect "a cluster JSON whose mem_limit_mb is more than its GPU's memory is refused" 1 "mem.json: field \"mem_limit_mb\" 36000 is more than the GPU's memory" -- \
  "$DPSIM" sim --hw "$TMP/mem.json" --iterations 1

expect "dprun profile: a point of 1e10 tokens is refused before anything runs (no int overflow)" 1 \
  "mbs 100000 x seqlen 100000 = 10000000000 tokens" -- "$DPRUN" profile --model gpt-tiny --mbs 100000 --seqlen 100000 -o "$TMP/pp.csv"

# a plan's own fields agree with each other: a sample trained once an iteration, in a micro-batch
# that trains one at least, its summaries what they sum
sed '0,/"samples": \[1\]/s//"samples": [0]/' $G/plan_4ranks.json >"$TMP/twice.json"
expect "a plan training a sample twice in an iteration is refused" 1 "twice.json: iteration 0 holds sample 0 twice.*rule: samples" -- \
  "$DPSIM" sim --plan "$TMP/twice.json"
sed '0,/"samples": \[0\]/s//"samples": []/' $G/plan_4ranks.json >"$TMP/nosample.json"
expect "a micro-batch without a sample is refused" 1 "nosample.json: iteration 0: micro-batch 0 trains no sample .rule: samples." -- \
  "$DPSIM" sim --plan "$TMP/nosample.json"
sed '0,/"tokens": 64/s//"tokens": 1000000000000/' $G/plan_4ranks.json >"$TMP/tokens.json"
expect "a micro-batch whose tokens are not its encoder's and decoder's is refused" 1 "tokens.json: iterations\[0\].microbatches\[0\].tokens is 1000000000000, but enc_tokens \+ dec_tokens is" -- \
  "$DPSIM" sim --plan "$TMP/tokens.json"

expect "compare --out naming a file is refused before the comparison runs" 2 "--out .*two_samples.csv is a file, not a folder" -- \
  "$DPSIM" compare "${TINY[@]}" --out "$TWO"

finish

#!/usr/bin/env bash
# tier: full (three searches of some seconds each; make check runs it, make test not)
# sanitizers: skip (the searches' code runs under ASan in test_study and the CLI scripts)
# dpsim tune at scale: progress lines on a stderr that is no terminal, a Ctrl-C (SIGINT) that
# leaves a valid partial ranking, and --resume that completes it to the same ranking as an
# uninterrupted search; a resume against other inputs is refused; under mpirun the same ranking.
. "$(dirname "$0")/lib.sh"
A="--model llama3-8b --hw dgx-h100 --gpus 8 --iterations 2 --max-seqlen 8192 --global-tokens 262144 --jobs 2"

# shellcheck disable=SC2086
"$DPSIM" tune $A -o "$TMP/full.csv" >"$TMP/full.out" 2>"$TMP/full.err"
check "an uninterrupted search writes its ranking" test "$(wc -l <"$TMP/full.csv")" -gt 100
check "... with progress lines on a stderr that is no terminal" grep -Eq '^dpsim tune: [0-9]+/[0-9]+ configurations done \([0-9]+ fit(, [0-9]+ pruned)?\), best [0-9]+ tokens/s' "$TMP/full.err"
check "... pruning by a lower bound on time, each pruned row saying how far it could get" \
  grep -Eq ',"?pruned: at most [0-9]+ tokens/s \(a lower bound on its time( from its tokens, before planning)?\), below the [0-9]+ of the best' "$TMP/full.csv"
check "... some before planning them, from their tokens alone" grep -q 'from its tokens, before planning' "$TMP/full.csv"
check "... and the speed-up over the best varlen packer" grep -q 'x best: over packing-' "$TMP/full.out"
# shellcheck disable=SC2086
"$DPSIM" tune $A --exhaustive -q -o "$TMP/exh.csv" >/dev/null 2>&1
# every configuration the pruned search kept, as --exhaustive simulates it, and each batching's
# best the same
check "the pruned search keeps what --exhaustive finds: every kept row, each batching's best" \
  python3 - "$TMP/full.csv" "$TMP/exh.csv" <<'PY'
import csv, sys
key = ("batching", "schedule", "chunks", "precision", "shard_group", "tp", "cp", "pp", "dp", "zero", "recompute", "mbs", "mb_tokens")
pruned, full = ({tuple(r[k] for k in key): r for r in csv.DictReader(open(p))} for p in sys.argv[1:])
assert pruned.keys() == full.keys() and any(r["why"].startswith("pruned") for r in pruned.values())
for k, r in pruned.items():
    if not r["why"].startswith("pruned"):
        assert (r["feasible"], r["throughput_tokens_per_s"]) == (full[k]["feasible"], full[k]["throughput_tokens_per_s"]), k
best = lambda rows, b: max((float(r["throughput_tokens_per_s"]) for r in rows.values()
                            if r["batching"] == b and r["feasible"] == "1"), default=0)
for b in {r["batching"] for r in full.values()}:
    assert best(pruned, b) == best(full, b) > 0, b
PY

# shellcheck disable=SC2086
"$DPSIM" tune $A -o "$TMP/part.csv" >"$TMP/part.out" 2>"$TMP/part.err" &
pid=$!
# the first partial ranking is written 2 s in: interrupt once it is there (not at a fixed time)
for _ in $(seq 1 600); do [ -s "$TMP/part.csv" ] && break; sleep 0.1; done
kill -INT $pid
wait $pid; rc=$?
check "SIGINT stops the search with status 130" test $rc -eq 130
check "... saying how far it got and how to go on" grep -q 'interrupted after [0-9]* of [0-9]* configurations; --resume' "$TMP/part.err"
rows=$(($(wc -l <"$TMP/part.csv") - 1))
check "... leaving a valid partial ranking (header, then rows of 21 fields)" bash -c \
  "head -1 '$TMP/part.csv' | grep -q '^rank,batching,' && sed 's/\"[^\"]*\"/q/g' '$TMP/part.csv' | awk -F, 'NR > 1 && NF != 21 { exit 1 }' && [ $rows -gt 0 ] && [ $rows -lt $(($(wc -l <"$TMP/full.csv") - 1)) ]"
# shellcheck disable=SC2086
expect "--resume goes on from it, running only the rest" 0 "configurations on 8 GPUs, [0-9]+ to run \\(the rest resumed\\)" -- "$DPSIM" tune $A -o "$TMP/part.csv" --resume
check "... to the same ranking as the uninterrupted search, rank by rank" diff "$TMP/full.csv" "$TMP/part.csv"
# shellcheck disable=SC2086
expect "a resume with other options is refused" 2 "was searched with other inputs \\(max-seqlen=8192 there, max-seqlen=4096 here\\)" -- \
  "$DPSIM" tune $A --max-seqlen 4096 -o "$TMP/part.csv" --resume
# a worker killed mid-search: its configuration has no result, the run goes on and exits 1 saying
# how many, and --resume runs that configuration again, to the same ranking
# (a worker killed in the instant between two configurations loses none: then again)
for _ in 1 2 3; do
  # shellcheck disable=SC2086
  "$DPSIM" tune $A -o "$TMP/kill.csv" >"$TMP/kill.out" 2>"$TMP/kill.err" &
  pid=$!
  child=
  for _ in $(seq 1 100); do child=$(pgrep -P $pid | head -1) && [ -n "$child" ] && break; sleep 0.1; done
  [ -n "$child" ] && kill -9 "$child"
  wait $pid; rc=$?
  [ $rc -ne 0 ] && break
done
check "a killed worker: the search ends with status 1" test $rc -eq 1
check "... saying how many configurations had no result" grep -q 'error: 1 configuration had no result: the worker died' "$TMP/kill.err"
check "... its row says so in the ranking" grep -q 'the worker died' "$TMP/kill.csv"
# shellcheck disable=SC2086
"$DPSIM" tune $A -o "$TMP/kill.csv" --resume >/dev/null 2>&1
check "... and --resume runs it again, to the same ranking" diff "$TMP/full.csv" "$TMP/kill.csv"
# the same when the dead worker held its batching's best of the first pass: the second pass had
# cut at a lower figure then (here: the best's row says its worker died, and the batching's pruned
# rows were cut at 1 tokens/s), and --resume runs those rows again against the whole first pass
best=$(sed -n 2p "$TMP/full.csv" | cut -d, -f2)
cp "$TMP/full.csv.config" "$TMP/lost.csv.config"
awk -F, -v OFS=, -v b="$best" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
  NR == 2 { $c["feasible"] = 0; $c["throughput_tokens_per_s"] = "0.00"; $c["mfu"] = "0.00000"; $c["peak_mem_mb"] = "0.0"
            $c["why"] = "the worker died (a crash or a signal): no result" }
  NR > 2 && $2 == b { sub(/below the [0-9]+ of the best/, "below the 1 of the best") } { print }' \
  "$TMP/full.csv" >"$TMP/lost.csv"
# shellcheck disable=SC2086
"$DPSIM" tune $A -o "$TMP/lost.csv" --resume >/dev/null 2>"$TMP/lost.err"
check "... and when it held its batching's best, the rows cut without it run again" \
  diff "$TMP/full.csv" "$TMP/lost.csv"
# under mpirun the configurations spread over the ranks (each its share, results shared after
# each pass): the same ranking, byte for byte, as one process
# shellcheck disable=SC2086
timeout 300 mpirun --allow-run-as-root --oversubscribe -np 3 "$DPSIM" tune $A --jobs 1 -o "$TMP/mpi.csv" \
  >"$TMP/mpi.out" 2>"$TMP/mpi.err"
check "under mpirun -np 3 the same ranking as one process" diff "$TMP/full.csv" "$TMP/mpi.csv"
check "... the same table, printed once" diff <(grep -v '^dpsim' "$TMP/full.out") "$TMP/mpi.out"
check "... and the closing progress line counts every rank's configurations" \
  grep -Eq '^dpsim tune: ([0-9]+)/\1 configurations done' "$TMP/mpi.err"
cp tests/cli/golden/two_samples.csv "$TMP/tr.csv"
"$DPSIM" tune --model gpt-tiny --hw cpu --analytic --trace "$TMP/tr.csv" --global-tokens 128 --gpus 2 -q -o "$TMP/small.csv" >/dev/null 2>&1
echo "t,5,7" >>"$TMP/tr.csv"
expect "... and one whose trace's content changed (same path)" 2 "trace_hash=" -- \
  "$DPSIM" tune --model gpt-tiny --hw cpu --analytic --trace "$TMP/tr.csv" --global-tokens 128 --gpus 2 -q -o "$TMP/small.csv" --resume
expect "--resume without -o" 2 "--resume needs -o" -- "$DPSIM" tune --resume

# --gpus counts every degree: with --cp 2, every ranked layout has tp x cp x pp x dp = 8
"$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --cp 2 --iterations 1 --max-seqlen 8192 \
  --global-tokens 65536 --batchings packing --schedules 1f1b -o "$TMP/cp.csv" >/dev/null 2>&1
check "tune --gpus 8 --cp 2: every row uses 8 GPUs" bash -c \
  "[ \$(wc -l <'$TMP/cp.csv') -gt 5 ] && awk -F, 'NR > 1 && \$6 * \$7 * \$10 * \$11 != 8 { exit 1 } NR == 1 && \$7 != \"cp\" { exit 1 }' '$TMP/cp.csv'"
expect "tune refuses --gpus that --cp does not divide, with the nearest" 2 "--gpus 10 is not a multiple of --cp 4.*" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 10 --cp 4 --iterations 1 -o "$TMP/no.csv"
check "... writing nothing" test ! -e "$TMP/no.csv"
# --cp takes a list: tune searches every degree, each layout still of --gpus GPUs; the best of the
# list is at least the best of each degree searched alone (cp 2's ranking above)
"$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --cp 1,2 --iterations 1 --max-seqlen 8192 \
  --global-tokens 65536 --batchings packing --schedules 1f1b -o "$TMP/cps.csv" >/dev/null 2>&1
check "tune --cp 1,2: rows of both degrees, every one of 8 GPUs" bash -c \
  "awk -F, 'NR > 1 { seen[\$7] = 1; if (\$6 * \$7 * \$10 * \$11 != 8) exit 1 } END { exit !(seen[1] && seen[2]) }' '$TMP/cps.csv'"
check "... its best at least cp 2's alone" bash -c \
  "awk -F, 'FNR == 2 { b[FILENAME] = \$18 } END { exit !(b[\"$TMP/cps.csv\"] + 0 >= b[\"$TMP/cp.csv\"] + 0) }' '$TMP/cps.csv' '$TMP/cp.csv'"
expect "a --cp list naming a degree twice is refused" 2 "names \"2\" twice" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --cp 1,2,2 -o "$TMP/no.csv"
expect "a --cp list with a degree not dividing --gpus is refused, naming it" 2 "not a multiple of --cp 3" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --cp 1,3 -o "$TMP/no.csv"
expect "a --cp list with an empty item is refused" 2 "is not a degree" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --cp 1,,2 -o "$TMP/no.csv"
# tp only where the layout rule takes it: GPT-2's 12 heads leave tp 8 out, said once, no row of it
"$DPSIM" tune --model gpt2-124m --hw dgx-h100 --gpus 8 --max-seqlen 1024 --iterations 1 --batchings packing \
  --schedules 1f1b -o "$TMP/g2.csv" >/dev/null 2>"$TMP/g2.err"
check "tune leaves out a tp the heads refuse, saying so" grep -q "tp 8 left out of the search: --tp 8 does not divide the 12 attention heads" "$TMP/g2.err"
check "... and ranks no row of it, nor any row the layout rule refuses" bash -c \
  "awk -F, 'NR > 1 && \$6 == 8 { exit 1 }' '$TMP/g2.csv' && ! grep -q 'does not divide' '$TMP/g2.csv' && [ \$(wc -l <'$TMP/g2.csv') -gt 100 ]"
# every ranked layout is one plan takes: at 8,192 GPUs the replicas stop where --dp's range does
"$DPSIM" tune --model gpt-tiny --hw cpu --analytic --gpus 8192 --allow-oversubscribe --iterations 1 \
  --batchings packing --schedules 1f1b -q -o "$TMP/huge.csv" >/dev/null 2>&1
top=$(awk -F, 'NR > 1 && $11 > m { m = $11; r = $0 } END { print r }' "$TMP/huge.csv")
expect "tune --gpus 8192: the ranking's widest dp ($(echo "$top" | cut -d, -f11)) is one plan takes" 0 "wrote 1 iterations" -- \
  "$DPSIM" plan --model gpt-tiny --hw cpu --analytic --allow-oversubscribe --iterations 1 --batching packing \
  --tp "$(echo "$top" | cut -d, -f6)" --pp "$(echo "$top" | cut -d, -f10)" --dp "$(echo "$top" | cut -d, -f11)" -o "$TMP/huge.json"
# auto is an item of the list: a group of --cp-max GPUs (either side of --cp), each micro-batch at
# its own degree; its rows are those of `--cp auto` searched alone, to the throughput
"$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --cp-max 2 --cp auto --exhaustive --iterations 1 \
  --max-seqlen 8192 --global-tokens 65536 --batchings packing,dynamic-varlen --schedules 1f1b \
  -o "$TMP/cpauto.csv" >/dev/null 2>&1
MIX="--model llama3-8b --hw dgx-h100 --gpus 8 --cp 1,2,auto --cp-max 2 --exhaustive --iterations 1
  --max-seqlen 8192 --global-tokens 65536 --batchings packing,dynamic-varlen --schedules 1f1b"
"$DPSIM" tune $MIX -o "$TMP/cpmix.csv" >/dev/null 2>&1
check "tune --cp 1,2,auto: auto's rows (cp_auto 1, cp the group) are --cp auto's alone, every row of 8 GPUs" python3 - "$TMP/cpauto.csv" "$TMP/cpmix.csv" <<'PY'
import csv, sys
alone, mix = (list(csv.DictReader(open(f))) for f in sys.argv[1:])
key = lambda r: tuple(r[k] for k in ("batching", "tp", "cp", "pp", "dp", "zero", "shard_group", "recompute", "mbs"))
n = lambda r, k: int(r[k])
assert alone and all(r["cp_auto"] == "1" and r["cp"] == "2" for r in alone)
assert all(n(r, "tp") * n(r, "cp") * n(r, "pp") * n(r, "dp") == 8 for r in alone + mix)
auto = {key(r): r for r in mix if r["cp_auto"] == "1"}
assert {r["cp"] for r in mix if r["cp_auto"] == "0"} == {"1", "2"} and len(auto) == len(alone)
for r in alone:
    assert auto[key(r)]["throughput_tokens_per_s"] == r["throughput_tokens_per_s"], r
assert any(r["feasible"] == "1" for r in auto.values())
PY
check "... and its config names the list" grep -q "^cp-list=1,2,auto$" "$TMP/cpmix.csv.config"
expect "... and --resume reads every row back by cp and cp_auto (none to run)" 0 "configurations on 8 GPUs, 0 to run \\(the rest resumed\\)" -- \
  "$DPSIM" tune $MIX -o "$TMP/cpmix.csv" --resume
expect "an auto group not dividing --gpus is refused, naming --cp-max" 2 "not a multiple of --cp-max 3" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --cp 1,auto --cp-max 3 -o "$TMP/no.csv"
expect "auto in a list with the all-to-all form is refused" 2 "--cp auto runs the ring form" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --cp 1,auto --cp-kind all-to-all -o "$TMP/no.csv"
# --precision takes a list: tune searches each number format (the ranking's precision column), fp8
# at the GPU's FP8 rate (--exhaustive: fp8 prunes every bf16 row otherwise); a GPU without one is
# refused before any search
"$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --precision bf16,fp8 --exhaustive --iterations 1 --max-seqlen 8192 \
  --global-tokens 65536 --batchings packing --schedules 1f1b -o "$TMP/fp.csv" >"$TMP/fp.out" 2>/dev/null
check "tune --precision bf16,fp8: the same layouts in both, fp8's best ahead of bf16's" python3 - "$TMP/fp.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
layout = lambda r: tuple(r[k] for k in ("tp", "cp", "pp", "dp", "zero", "recompute", "mbs"))
by = {p: {layout(r): r for r in rows if r["precision"] == p} for p in ("bf16", "fp8")}
assert by["bf16"].keys() == by["fp8"].keys() and len(by["bf16"]) > 5
best = {p: max(float(r["throughput_tokens_per_s"]) for r in by[p].values() if r["feasible"] == "1") for p in by}
assert best["fp8"] > best["bf16"], best
assert rows[0]["precision"] == "fp8"
PY
check "... the best configuration says its precision" grep -q "precision=fp8 tp=" "$TMP/fp.out"
expect "... and --resume reads every row back by its precision (none to run)" 0 "configurations on 8 GPUs, 0 to run \\(the rest resumed\\)" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --precision bf16,fp8 --exhaustive --iterations 1 --max-seqlen 8192 \
  --global-tokens 65536 --batchings packing --schedules 1f1b -o "$TMP/fp.csv" --resume
expect "a --precision list with fp8 on a GPU without an FP8 rate is refused" 2 "fp8" -- \
  "$DPSIM" tune --model gpt-6.7b-16l --hw p4d --analytic --gpus 8 --precision bf16,fp8 -o "$TMP/no.csv"
expect "a --precision list naming one twice is refused" 2 "names \"fp8\" twice" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --precision fp8,bf16,fp8 -o "$TMP/no.csv"
expect "a --precision list with an unknown name is refused" 2 "\"fp4\" is not a precision" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --precision bf16,fp4 -o "$TMP/no.csv"
# A mixture of experts: tune searches ep (1,2,4,8: those dividing the 128 experts that fit a node),
# each layout taking the degrees that divide its tp x cp x dp; the ranking's ep column, a resume
# reading it back, and the refusals of an ep that does not divide the experts or names a dense model
QWEN="--model tests/data/hf/qwen3-30b-a3b.json --hw dgx-h100 --gpus 16 --iterations 1 --batchings packing --schedules 1f1b"
"$DPSIM" tune $QWEN -o "$TMP/moe.csv" >"$TMP/moe.out" 2>/dev/null
check "tune of a MoE searches ep 1, 2, 4 and 8, each where it divides tp x cp x dp; ep 1 loses" python3 - "$TMP/moe.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert {r["ep"] for r in rows} == {"1", "2", "4", "8"}, {r["ep"] for r in rows}
for r in rows:
    assert (int(r["tp"]) * int(r["cp"]) * int(r["dp"])) % int(r["ep"]) == 0, r
best = lambda e: max([float(r["throughput_tokens_per_s"]) for r in rows if r["ep"] == e and r["feasible"] == "1"] or [0])
assert rows[0]["feasible"] == "1" and rows[0]["ep"] != "1", rows[0]
assert best("8") > best("1") > 0, (best("8"), best("1"))
PY
check "... the best configuration says its ep, and the config its list" bash -c \
  "grep -Eq 'ep=[248] pp=' '$TMP/moe.out' && grep -q '^ep-list=1,2,4,8$' '$TMP/moe.csv.config'"
expect "... and --resume reads every row back by its ep (none to run)" 0 "configurations on 16 GPUs, 0 to run \\(the rest resumed\\)" -- \
  "$DPSIM" tune $QWEN -o "$TMP/moe.csv" --resume
"$DPSIM" tune $QWEN --ep 8 -o "$TMP/moe8.csv" >/dev/null 2>&1
check "tune --ep 8 searches that degree alone" bash -c \
  "[ \"\$(cut -d, -f9 '$TMP/moe8.csv' | sort -u | tr '\n' ' ')\" = '8 ep ' ]"
expect "an --ep that does not divide the experts is refused, naming it" 2 "--ep 3 does not divide the 128 experts" -- \
  "$DPSIM" tune $QWEN --ep 1,3 -o "$TMP/no.csv"
expect "--ep on a dense model is refused" 2 "--ep: llama3-8b is dense" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --ep 1,2 -o "$TMP/no.csv"
# HSDP: ZeRO-3 also sharded over a node's GPUs of the data-parallel group and replicated across
# nodes, each such row beside its fully sharded twin, holding more state
"$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 16 --exhaustive --iterations 1 --max-seqlen 8192 \
  --global-tokens 131072 --batchings packing --schedules 1f1b -q -o "$TMP/hsdp.csv" >"$TMP/hsdp.out" 2>/dev/null
check "tune --gpus 16: HSDP rows (a node's GPUs of the group), each beside its fully sharded twin" python3 - "$TMP/hsdp.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
n = lambda r, k: int(r[k])
key = lambda r, g: tuple(r[k] for k in ("precision", "tp", "cp", "pp", "dp", "zero", "recompute", "mbs")) + (g,)
whole = {key(r, r["shard_group"]): r for r in rows}
hsdp = [r for r in rows if n(r, "shard_group") < n(r, "dp") * n(r, "cp")]
assert hsdp, "no HSDP row"
for r in hsdp:
    width = n(r, "tp") * n(r, "cp") * n(r, "pp")
    assert r["zero"] == "3" and n(r, "shard_group") == n(r, "cp") * 8 // width, r
    twin = whole[key(r, str(n(r, "dp") * n(r, "cp")))]
    if r["feasible"] == "1" and twin["feasible"] == "1":
        assert float(r["peak_mem_mb"]) > float(twin["peak_mem_mb"]), (r, twin)
assert all(n(r, "shard_group") == n(r, "dp") * n(r, "cp") for r in rows if r["zero"] != "3")
PY
expect "... and --resume reads every row back by its shard group (none to run)" 0 "configurations on 16 GPUs, 0 to run \\(the rest resumed\\)" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 16 --exhaustive --iterations 1 --max-seqlen 8192 \
  --global-tokens 131072 --batchings packing --schedules 1f1b -o "$TMP/hsdp.csv" --resume
expect "tune refuses --shard-group: it searches it" 2 "shard-group is what tune searches" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 16 --shard-group 8 -o "$TMP/no.csv"
# interleaved is searched at 2 and 4 chunks, on pipelines of 2 stages or more (the ranking's chunks
# column; 1 for the other schedules), and --chunks is what tune chooses
"$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --iterations 1 --max-seqlen 8192 \
  --global-tokens 65536 --batchings packing --schedules 1f1b,interleaved -o "$TMP/il.csv" >/dev/null 2>&1
check "tune --schedules 1f1b,interleaved: interleaved rows at chunks 2 and 4, pp >= 2; 1f1b at 1" bash -c \
  "awk -F, 'NR == 1 && \$4 != \"chunks\" { exit 1 } NR > 1 && \$3 == \"interleaved\" { seen[\$4] = 1; if (\$10 < 2) exit 1 }
            NR > 1 && \$3 == \"1f1b\" && \$4 != 1 { exit 1 } END { exit !(seen[2] && seen[4]) }' '$TMP/il.csv'"
expect "tune refuses --chunks: it searches them" 2 "chunks is what tune searches" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --chunks 2 -o "$TMP/no.csv"
# where the search's time went: the costliest (batching, schedule) groups, on stderr
expect "tune says where its time went, by batching and schedule" 0 "where the time went \\(workers' seconds\\): [a-z-]+/[a-z0-9]+ [0-9]+% \\([0-9]+, [0-9.e-]+ s each\\)" -- \
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --iterations 1 --max-seqlen 8192 \
    --global-tokens 65536 --batchings packing,dynamic --schedules 1f1b
# a search where nothing fits has no answer: an error naming the nearest configuration and what
# stands in its way (the model state, not a hint about options tune sets itself)
expect "a search where no configuration fits is an error, naming the nearest and why" 1 "none of the [0-9]+ configurations of 8 GPUs fits; the nearest \\(batching=.*zero=[0-9].*\\): the model state of stage 0 \\([0-9]+ MB" -- \
  "$DPSIM" tune --gpus 8 --mem-limit 2000 --iterations 1 --batchings packing,dynamic -q
# ZeRO 2 and 3 with a pipeline only under --zero-pipeline (columns found by their header names)
zp_rows() { # CSV: the rows with pp > 1 and ZeRO 2 or 3
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
           $c["pp"] > 1 && $c["zero"] >= 2 { n++ } END { print n + 0 }' "$1"
}
for zp in "" --zero-pipeline; do
  "$DPSIM" tune --model llama3-8b --hw dgx-h100 --gpus 8 --iterations 1 --max-seqlen 8192 \
    --global-tokens 65536 --batchings packing --schedules 1f1b $zp -q -o "$TMP/zp$zp.csv" >/dev/null 2>&1
done
check "tune leaves ZeRO 2/3 with a pipeline out ($(zp_rows "$TMP/zp.csv") rows), --zero-pipeline searches them ($(zp_rows "$TMP/zp--zero-pipeline.csv"))" \
  bash -c "[ $(zp_rows "$TMP/zp.csv") -eq 0 ] && [ $(zp_rows "$TMP/zp--zero-pipeline.csv") -gt 0 ]"
finish

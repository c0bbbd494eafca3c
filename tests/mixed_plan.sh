#!/bin/bash
# tests/mixed_plan.sh IN OUT: a "mixed" plan (planner/mixed_recompute.h) made from IN, a plan
# under "recompute": "none" written by dpsim plan (compact JSON), with micro-batch k of every
# iteration under none, selective, full for k mod 3. The micro-batches, instructions and predicted
# times stay IN's (so the times do not price the reruns: this is for the executors, whose gradient
# norm must not change, not for dpsim validate's error). Used by tests/cli/test_dprun_cli.sh and
# tests/gpu/check_gpu.sh.
set -eu
[ $# = 2 ] || { echo "usage: tests/mixed_plan.sh IN.json OUT.json" >&2; exit 2; }
grep -q '"recompute":"none"' "$1" || { echo "tests/mixed_plan.sh: $1 is not a plan under recompute none" >&2; exit 1; }
sed '1s/"recompute":"none"/"recompute":"mixed"/; 2,$s/,"recompute":"none"//' "$1" |
    awk '{ out = ""
           while (match($0, /"id":[0-9]+,"samples"/)) {
               id = substr($0, RSTART + 5, RLENGTH - 15)
               m = id % 3 == 0 ? "none" : id % 3 == 1 ? "selective" : "full"
               out = out substr($0, 1, RSTART - 1) "\"id\":" id ",\"recompute\":\"" m "\",\"samples\""
               $0 = substr($0, RSTART + RLENGTH)
           }
           print out $0 }' >"$2"

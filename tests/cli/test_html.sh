#!/usr/bin/env bash
# tier: full (a headless browser, 12 s; make check runs it, make test not)
# The interactive timeline page (dpsim sim --html, dpsim plot schedules --html) in a real browser:
# headless Chromium (Debian's `chromium`, which make check installs) loads the page, runs its
# script, and the test reads the DOM it built: one box per compute op of the plan (counted
# independently from the timeline CSV of the same runs), the Step button's cursor, and a
# screenshot. Skipped, saying so, where Chromium is absent.
. "$(dirname "$0")/lib.sh"

# the compute ops (F, B, W) of iteration 0, replica 0 of a timeline CSV
ops_of() { awk -F, 'NR > 1 && $1 == 0 && $7 == 0 && ($3 == "F" || $3 == "B" || $3 == "W")' "$1" | wc -l; }

expect "plot schedules writes a page" 0 "wrote .*/page.html" -- \
  "$DPSIM" plot schedules --toy-costs 1,2,1 --schedules gpipe,1f1b,interleaved,zb1 --chunks 2 \
  -o "$TMP/s.png" --memory "$TMP/m.png" --html "$TMP/page.html"
check "... and the panels and memory figures" bash -c "$(declare -f is_png); is_png '$TMP/s.png' 20000 && is_png '$TMP/m.png' 20000"
check "... self-contained: no network, no external script or style" \
  bash -c "! grep -Eiq '(src|href)=\"?(https?:)?//' '$TMP/page.html'"
want=0
for s in gpipe 1f1b interleaved zb1; do
  chunks=1; [ $s = interleaved ] && chunks=2
  "$DPSIM" sim --toy-costs 1,2,1 --schedule $s --chunks $chunks --timeline "$TMP/t_$s.csv" >/dev/null 2>&1
  want=$((want + $(ops_of "$TMP/t_$s.csv")))
done
"$DPSIM" plan --iterations 2 -o "$TMP/plan.json" >/dev/null 2>&1
expect "sim of a plan file writes its page" 0 "wrote .*/plan.html" -- \
  "$DPSIM" sim --plan "$TMP/plan.json" --html "$TMP/plan.html" --figure-iteration 1 --timeline "$TMP/tp.csv"
plan_ops=$(awk -F, 'NR > 1 && $1 == 1 && $7 == 0 && ($3 == "F" || $3 == "B" || $3 == "W")' "$TMP/tp.csv" | wc -l)
expect "a page of an iteration the run does not have is refused" 1 "iteration 5 \\(replica 0\\) is not in the run" -- \
  "$DPSIM" sim --iterations 2 --html "$TMP/none.html" --figure-iteration 5

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  skip "the browser checks: chromium is not installed (make check installs it: apt-get install chromium)"
  finish; exit $?
fi
dom() { # the DOM after the page's script ran
  timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --virtual-time-budget=3000 \
    --dump-dom "file://$1" 2>/dev/null
}
dom "$TMP/page.html" >"$TMP/dom.html"
got=$(grep -o '<rect [^>]*class="op[ "]' "$TMP/dom.html" | wc -l)
check "Chromium draws one box per compute op of the four schedules ($want)" test "$got" -eq "$want" -a "$want" -gt 200
check "... and says so on the page" grep -q "data-ops=\"$want\"" "$TMP/dom.html"
check "... with each panel's heading: bubble and closed form" \
  grep -q 'zb1: 27.00 ms, 8 micro-batches, pipeline bubble 11.11% (closed form 11.11%)' "$TMP/page.html"
# Step walks the ends of the ops: three steps from 0 stop at the third distinct end of any panel
third=$(cat "$TMP"/t_*.csv | awk -F, 'NR > 1 && $1 == 0 && $7 == 0 && ($3 == "F" || $3 == "B" || $3 == "W") { printf "%.6f\n", $6 / 1000 }' | sort -un | sed -n 3p)
dom "$TMP/page.html#step3" >"$TMP/dom3.html"
check "Step three times from the start: the cursor at the third op end ($third ms), later boxes faded" \
  bash -c "grep -q 'data-now=\"$third\"' '$TMP/dom3.html' && grep -Eq 'data-later=\"[1-9][0-9]*\"' '$TMP/dom3.html'"
dom "$TMP/plan.html" >"$TMP/domp.html"
got=$(grep -o '<rect [^>]*class="op[ "]' "$TMP/domp.html" | wc -l)
check "a plan file's page: one box per op of its iteration 1 ($plan_ops)" test "$got" -eq "$plan_ops" -a "$plan_ops" -gt 0
timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1000 \
  --screenshot="$TMP/shot.png" "file://$TMP/page.html" >/dev/null 2>&1
check "a screenshot of the page" is_png "$TMP/shot.png" 5000 # without fonts (no recommends) still boxes
[ -n "${DPSIM_KEEP_SCREENSHOT:-}" ] && cp "$TMP/shot.png" "$DPSIM_KEEP_SCREENSHOT"
finish

#!/usr/bin/env bash
# The one test runner: every unit-test binary and every CLI test script, for each build folder
# given (e.g. build and build/san). One line per test program, with its wall-clock seconds (to
# find what makes the run long; nothing asserts on them); the very last line is exactly
# "N passed, N failed, N skipped" (test cases; a skipped program counts one). Exits non-zero when
# anything failed. DPSIM_TEST_TIER=fast (make test) skips the unit tests and CLI scripts marked
# "tier: full" in their first lines (the MPI runs of the validation runtime, the fake GPU's
# plans, the browser and valgrind passes); make check runs everything. The fast tier runs two
# programs at once (the machine's two cores; DPSIM_TEST_JOBS sets how many), make check one at a
# time (its MPI jobs oversubscribe the cores already); either way the lines come in the same order.
set -u
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || set -- build
passed=0 failed=0 skipped=0 programs_failed=0
# The tests' processes share a few cores: BLAS runs one thread a process (its idle threads spin in
# sched_yield under MPI's oversubscription), and glibc keeps freed blocks for reuse rather than
# unmapping every large one (the fake GPU's device memory is the host's: the executor's buffers of
# every micro-batch were fresh pages; test_exec_gpu 19 s -> 11 s here). Neither changes a result;
# a caller's own settings win.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
export GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=1073741824}
logdir=$(mktemp -d /tmp/dpsim-tests.XXXXXX)
trap 'rm -rf "$logdir"' EXIT

jobs=${DPSIM_TEST_JOBS:-$([ "${DPSIM_TEST_TIER:-full}" = fast ] && echo 2 || echo 1)}

report() { # name status cases_passed cases_failed log seconds [cases_skipped]
  local name=$1 ok=$2 p=$3 f=$4 log=$5 took=$6 sk=${7:-0}
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + sk))
  if [ "$ok" = 1 ]; then
    printf 'PASS  %-44s %4d passed  %4d s%s\n' "$name" "$p" "$took" \
      "$([ "$sk" -gt 0 ] && echo "  ($sk skipped)")"
  else
    programs_failed=$((programs_failed + 1))
    printf 'FAIL  %-44s %4d passed, %d failed  %4d s\n' "$name" "$p" "$f" "$took"
    sed 's/^/      | /' "$log" | tail -n 40
  fi
}

# The programs of a build in order: each a kind (unit, replay, cli or skip), its name, its log and
# (skip) the line to print; run() starts one (at most $jobs at once), its exit status and seconds
# written beside its log; report_all() waits for them and reports each in order.
tasks=()
run() { # KIND NAME LOG CMD...
  local kind=$1 name=$2 log=$3; shift 3
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  ( s=$SECONDS; "$@" >"$log" 2>&1; echo "$? $((SECONDS - s))" >"$log.rc" ) &
  tasks+=("$kind"$'\t'"$name"$'\t'"$log")
}
skip() { tasks+=("skip"$'\t'"$1"$'\t'""); skipped=$((skipped + 1)); }
report_all() {
  wait
  local kind name log rc took p f sk
  for t in "${tasks[@]}"; do
    IFS=$'\t' read -r kind name log <<<"$t"
    if [ "$kind" = skip ]; then echo "$name"; continue; fi
    read -r rc took <"$log.rc"
    case $kind in
      unit)
        p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
        f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
        sk=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
        p=${p:-0}; f=${f:-0}; sk=${sk:-0}
        if [ "$rc" -ne 0 ] && [ "$f" = 0 ]; then f=1; fi   # crashed or sanitizer abort
        report "$name" $([ "$rc" -eq 0 ] && echo 1 || echo 0) "$p" "$f" "$log" "$took" "$sk" ;;
      replay)
        p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1); p=${p:-0}
        f=0; [ "$rc" -ne 0 ] && f=1
        report "$name" $([ "$rc" -eq 0 ] && echo 1 || echo 0) "$p" "$f" "$log" "$took" ;;
      cli)
        sk=$(grep -c '^ok [0-9]* # SKIP' "$log"); p=$(($(grep -c '^ok ' "$log") - sk))
        f=$(grep -c '^not ok ' "$log")
        if [ "$rc" -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
        report "$name" $([ "$rc" -eq 0 ] && [ "$f" = 0 ] && echo 1 || echo 0) "$p" "$f" "$log" "$took" "$sk" ;;
    esac
  done
  tasks=()
}

for build in "$@"; do
  if [ ! -x "$build/dpsim" ]; then
    echo "FAIL  $build/dpsim is missing (run make first)"; failed=$((failed + 1)); continue
  fi
  # ASan: report leaks too; UBSan: stop at the first error with a stack.
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  for bin in "$build"/tests/test_*; do
    [ -x "$bin" ] || continue
    src="tests/unit/$(basename "$bin").c"
    if [ "${DPSIM_TEST_TIER:-full}" = fast ] && [ -f "$src" ] && head -5 "$src" | grep -q 'tier: full'; then
      skip "$(printf 'SKIP  %-44s (tier full: make check runs it)' "$bin")"; continue
    fi
    run unit "$bin" "$logdir/$(echo "$bin" | tr / _).log" "$bin"
  done
  for bin in "$build"/fuzz-replay/*; do  # seed corpora and every crash ever found
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    if [ "${DPSIM_TEST_TIER:-full}" = fast ] && head -5 "tests/fuzz/fuzz_$name.c" 2>/dev/null | grep -q 'tier: full'; then
      skip "$(printf 'SKIP  %-44s (tier full: make check runs it)' "$bin (corpus replay)")"; continue
    fi
    log="$logdir/replay-$name-$(echo "$build" | tr / _).log"
    # the differential target initialises MPI, whose unloaded components leak what ASan cannot
    # name (as for the MPI jobs of the CLI tests): its leak check is off, its memory checks on
    if [ "$name" = differential ]; then
      run replay "$bin (corpus replay)" "$log" env ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 \
        "$bin" "tests/fuzz/corpus/$name"
    else
      run replay "$bin (corpus replay)" "$log" "$bin" "tests/fuzz/corpus/$name"
    fi
  done
  for script in tests/cli/test_*.sh; do
    [ -f "$script" ] || continue
    # the fast tier (make test) leaves out the scripts whose first lines say "# tier: full"
    if [ "${DPSIM_TEST_TIER:-full}" = fast ] && head -5 "$script" | grep -q '^# tier: full'; then
      skip "$(printf 'SKIP  %-44s (tier full: make check runs it)' "$script [$build]")"; continue
    fi
    # a script whose first lines say "# sanitizers: skip" runs in the plain build only (its time
    # is in searches the sanitizer pass of the unit tests already covers)
    if [ "$build" != "$1" ] && head -5 "$script" | grep -q '^# sanitizers: skip'; then
      skip "$(printf 'SKIP  %-44s (plain build only)' "$script [$build]")"; continue
    fi
    run cli "$script [$build]" "$logdir/$(basename "$script")-$(echo "$build" | tr / _).log" \
      env DPSIM="$build/dpsim" bash "$script"
  done
  report_all
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$programs_failed" -eq 0 ]

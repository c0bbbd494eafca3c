# Helpers for the CLI scripts that run dprun over MPI (sourced after lib.sh): the runtime binary
# beside $DPSIM, mpirun as these scripts call it (root allowed, more ranks than cores; under the
# sanitizer build leak checking is off for MPI jobs: OpenMPI's components are unloaded before exit,
# so what they keep cannot even be named, ASan's memory checks stay on), SANITIZED (set under the
# sanitizer build, whose scripts run fewer plans), and the gradient-norm comparison that checks one
# layout against another.
DPRUN=$(dirname "$DPSIM")/dprun
MPIRUN="mpirun --allow-run-as-root --oversubscribe -x ASAN_OPTIONS=detect_leaks=0"
export OMPI_MCA_btl_vader_single_copy_mechanism=none # quiet in containers without CMA
case "$DPSIM" in */san/*) SANITIZED=1 ;; *) SANITIZED= ;; esac

norm() { grep -Eo 'gradient norm [0-9.e+-]+' "$1" | awk '{print $3}'; }
mbs_of() { grep -o '"samples": *\[[0-9, ]*\]' "$1" | tr -d ' '; }
run_norm() { # NAME NP: runs plan $TMP/NAME.json on NP cpu ranks; prints its gradient norm
  timeout 300 $MPIRUN -np "$2" "$DPRUN" --plan "$TMP/$1.json" --out "$TMP/$1.csv" >"$TMP/$1.out" 2>&1
  norm "$TMP/$1.out"
}
# same NAME REF NP: plan NAME on NP ranks ends with plan REF's norm (run before) to 1e-9 relative,
# and the two plans hold the same micro-batches
same() {
  local name=$1 ref=$2 np=$3 a b
  a=$(norm "$TMP/$ref.out") b=$(run_norm "$name" "$np")
  if [ "$(mbs_of "$TMP/$name.json")" != "$(mbs_of "$TMP/$ref.json")" ]; then
    not_ok "$name: the same micro-batches as $ref" "$(mbs_of "$TMP/$name.json" | head -c 200)"
  elif [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { d = (a > b ? a - b : b - a) / a; exit !(d < 1e-9) }'; then
    ok "$name on $np ranks: gradient norm $b, as $ref's"
  else
    not_ok "$name on $np ranks: gradient norm ${b:-none}, $ref's ${a:-none}" "$(tail -c 400 "$TMP/$name.out")"
  fi
}
# same_gpu NAME REF NP [DTYPE]: plan NAME on NP fake GPUs (the cuda backend's executor on
# tests/unit/fake_cuda.c: the CPU layer, NCCL as MPI) ends with plan REF's norm on the cpu ranks (run
# before): fp64 to 1e-9 relative, bf16 to 1e-2 (make check-gpu-rehearsal runs bf16)
FAKE=$(dirname "$DPSIM")/tests/dprun-fake-gpu
same_gpu() {
  local name=$1 ref=$2 np=$3 dt=${4:-fp64} a b tol
  timeout 300 $MPIRUN -np "$np" "$FAKE" --plan "$TMP/$name.json" --backend cuda --dtype "$dt" \
    --warmup 0 --no-prepare --no-noise --out "$TMP/g$name.csv" >"$TMP/g$name.out" 2>&1
  a=$(norm "$TMP/$ref.out") b=$(norm "$TMP/g$name.out") tol=$([ "$dt" = fp64 ] && echo 1e-9 || echo 1e-2)
  if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" -v t="$tol" 'BEGIN { d = (a > b ? a - b : b - a) / a; exit !(d < t) }'; then
    ok "$name on $np fake GPUs ($dt): gradient norm $b, as $ref's on the cpu ranks (to $tol)"
    # one row per instruction: a tp x cp group's first rank records
    check "... its timeline a row per instruction" bash -c \
      "[ -s '$TMP/g$name.csv' ] && [ -z \"\$(cut -d, -f1-4,7,8,11 '$TMP/g$name.csv' | sort | uniq -d)\" ]"
  else
    not_ok "$name on $np fake GPUs ($dt): gradient norm ${b:-none}, $ref's ${a:-none}" "$(tail -c 400 "$TMP/g$name.out")"
  fi
}

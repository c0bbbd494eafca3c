# Helpers for the CLI test scripts (sourced). Each check prints "ok N - name" or
# "not ok N - name" with the evidence; tests/run.sh counts those lines.
# $DPSIM is the binary under test; $TMP a scratch folder removed at exit.
set -u
: "${DPSIM:=build/dpsim}"
TMP=$(mktemp -d /tmp/dpsim-cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
n=0 nfail=0

ok()     { n=$((n + 1)); echo "ok $n - $1"; }
skip()   { n=$((n + 1)); echo "ok $n # SKIP $1"; }  # not run here, and said so (run.sh counts it)
not_ok() { n=$((n + 1)); nfail=$((nfail + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "#   $l"; done; }

# expect NAME RC PATTERN -- CMD...: runs CMD, wants exit status RC and PATTERN (an extended
# regular expression, or "" for none) somewhere in its stdout+stderr.
expect() {
  local name=$1 want_rc=$2 pattern=$3; shift 4
  "$@" >"$TMP/out" 2>&1; local rc=$?
  if [ $rc -ne "$want_rc" ]; then
    not_ok "$name" "exit $rc, wanted $want_rc: $*" "$(head -c 600 "$TMP/out")"
  elif [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$TMP/out"; then
    not_ok "$name" "output lacks /$pattern/: $*" "$(head -c 600 "$TMP/out")"
  else
    ok "$name"
  fi
}

# check NAME CONDITION-CMD...: passes when the command succeeds.
check() {
  local name=$1; shift
  if "$@" >"$TMP/check" 2>&1; then ok "$name"; else not_ok "$name" "failed: $*" "$(head -c 600 "$TMP/check")"; fi
}

# is_png FILE MIN_BYTES: a PNG signature and a sensible size.
is_png() {
  [ -f "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
    [ "$(stat -c %s "$1")" -ge "$2" ]
}

finish() { echo "# $n checks, $nfail failed"; [ "$nfail" -eq 0 ]; }

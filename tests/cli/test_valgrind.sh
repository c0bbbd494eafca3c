#!/usr/bin/env bash
# tier: full (a compare under valgrind; make check runs it, make test not)
# One `dpsim compare` under valgrind: no leaks, no invalid accesses (the plain build only; the
# sanitizer build is checked by ASan itself).
. "$(dirname "$0")/lib.sh"
case "$DPSIM" in
  */san/*) skip "the valgrind pass: not under the sanitizers' build"; finish; exit ;;
esac
if ! command -v valgrind >/dev/null; then not_ok "valgrind is installed (make deps installs it)"; finish; exit; fi
expect "dpsim compare under valgrind: no errors, no leaks" 0 "ERROR SUMMARY: 0 errors" -- \
  valgrind --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
  --error-exitcode=9 "$DPSIM" compare --iterations 2 --no-figures
expect "dpsim plan + sim under valgrind" 0 "ERROR SUMMARY: 0 errors" -- \
  valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=9 \
  "$DPSIM" sim --schedule zb1 --iterations 2 --timeline "$TMP/t.csv"
# a plan refused for its header frees what it read
printf '{"version": 1, "pp": 1, "overlap": "sideways", "iterations": []}' >"$TMP/bad_header.json"
expect "a plan refused for a header field, under valgrind: no leaks" 1 "ERROR SUMMARY: 0 errors" -- \
  valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=9 \
  "$DPSIM" sim --plan "$TMP/bad_header.json"
finish

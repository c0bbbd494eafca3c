#!/usr/bin/env bash
# Rewrites every --help block of docs/cli.md with the binary's current output (tests/cli/
# test_docs.sh fails until this is run after an option table changes). The prose is kept.
# usage: tools/update_cli_doc.sh [build]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
i=0
# the dpsim commands whose --help docs/cli.md shows (one per line; the empty line: dpsim itself),
# the list tests/cli/test_docs.sh checks too; then dprun
while IFS= read -r c || [ -n "$c" ]; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  "$B/dpsim" $c --help >"$tmp/$i" 2>&1 || true
done <tools/cli_help_commands.txt
i=$((i + 1))
"$B/dprun" --help >"$tmp/$i" 2>&1 || true
# replace, in order, each block whose first line is a help's first line
awk -v dir="$tmp" -v n="$i" '
  BEGIN { for (k = 1; k <= n; k++) { f = dir "/" k; getline first[k] < f; close(f) } }
  skipping { if ($0 ~ /^```/) { skipping = 0; print } ; next }
  { for (k = 1; k <= n; k++) if ($0 == first[k]) { f = dir "/" k; while ((getline l < f) > 0) print l; close(f); skipping = 1; next } print }
' docs/cli.md >"$tmp/cli.md"
mv "$tmp/cli.md" docs/cli.md
echo "docs/cli.md: $i help blocks rewritten"

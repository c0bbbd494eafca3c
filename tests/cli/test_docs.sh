#!/usr/bin/env bash
# The docs against the code: every --help block of docs/cli.md is the binary's own output (an
# option added or changed in an option table shows here until the page is regenerated, with the
# loop at its top), and every relative link of README.md and docs/*.md resolves.
. "$(dirname "$0")/lib.sh"
DPRUN=${DPSIM%dpsim}dprun

# the block of docs/cli.md that starts with the help's first line, up to its closing fence
block_of() { awk -v first="$1" 'started && /^```/ { exit } started { print } $0 == first { started = 1; print }' docs/cli.md; }
while IFS= read -r c || [ -n "$c" ]; do # the list tools/update_cli_doc.sh rewrites
  # shellcheck disable=SC2086
  "$DPSIM" $c --help >"$TMP/help.txt" 2>&1
  first=$(head -1 "$TMP/help.txt")
  block_of "$first" >"$TMP/doc.txt"
  check "docs/cli.md shows 'dpsim $c --help' as it is" diff "$TMP/doc.txt" "$TMP/help.txt"
done <tools/cli_help_commands.txt
if [ -x "$DPRUN" ]; then
  "$DPRUN" --help >"$TMP/help.txt" 2>&1
  block_of "$(head -1 "$TMP/help.txt")" >"$TMP/doc.txt"
  check "docs/cli.md shows 'dprun --help' as it is" diff "$TMP/doc.txt" "$TMP/help.txt"
fi

# relative links and images: [text](path) and [text](path#anchor), outside code spans
bad=""
for f in README.md docs/*.md CHANGELOG.md; do
  dir=$(dirname "$f")
  for link in $(grep -o '](\([^)#: ]*\)[^) ]*)' "$f" | sed 's/^](\([^)#]*\).*/\1/' | sort -u); do
    [ -z "$link" ] && continue
    case "$link" in http*|mailto*) continue ;; esac
    [ -e "$dir/$link" ] || bad="$bad $f:$link"
  done
done
check "every relative link of the README and docs resolves${bad:+ (broken:$bad)}" test -z "$bad"
# every CLI script ends with its one `finish` (the tally and the exit status): checks after a
# `finish` in the middle would count and still leave the exit status to their last command
bad=""
for f in tests/cli/test_*.sh; do
  [ "$(grep -c '^finish$' "$f")" = 1 ] && [ "$(grep -v '^[[:space:]]*$' "$f" | tail -n 1)" = finish ] || bad="$bad $f"
done
check "every CLI script ends with its one finish${bad:+ (not:$bad)}" test -z "$bad"
finish

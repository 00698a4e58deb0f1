#!/bin/sh
# Writes the commit zonefeed is built from into Sources/ZoneFeedCommandLine/BuildInfo.swift, so that
# `zonefeed --version` names it. Run from the package root before `swift build`:
#   docker/stamp-commit.sh "$(git rev-parse --short HEAD)"
# The Dockerfile runs it with the ZONEFEED_COMMIT build argument. An empty commit changes nothing.
set -eu
commit="${1:-}"
[ -n "$commit" ] || exit 0
case "$commit" in
  *[!0-9A-Za-z._-]*) echo "stamp-commit: '$commit' is not a commit name" >&2; exit 2 ;;
esac
file=Sources/ZoneFeedCommandLine/BuildInfo.swift
grep -q '// stamp-commit$' "$file" || { echo "stamp-commit: no '// stamp-commit' line in $file" >&2; exit 2; }
sed -i "s|^\(    static let commit: String?\) = .*// stamp-commit\$|\1 = \"$commit\"  // stamp-commit|" "$file"
grep -q "\"$commit\"  // stamp-commit" "$file"

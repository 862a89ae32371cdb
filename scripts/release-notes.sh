#!/usr/bin/env bash
# release-notes.sh TAG: prints the section of CHANGELOG.md for TAG (v0.1.0 reads "## [0.1.0] - ..."),
# without its heading, for the GitHub release's text. Fails when the section is missing or empty,
# so a tag is not released without its changelog entry.
set -euo pipefail
tag=${1:?usage: release-notes.sh vX.Y.Z}
version=${tag#v}
changelog="$(dirname "$0")/../CHANGELOG.md"
notes=$(awk -v v="$version" '
	/^## \[/ { if (found) exit; found = index($0, "## [" v "]") == 1; next }
	found && !/^\[[^]]*\]: / { print }
' "$changelog")
if [ -z "${notes//[$'\n\t ']/}" ]; then
	echo "release-notes.sh: CHANGELOG.md has no section \"## [$version]\" for $tag" >&2
	exit 1
fi
printf '%s\n' "$notes"

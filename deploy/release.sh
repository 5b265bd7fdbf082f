#!/bin/sh
# release.sh builds the pinplan binary that people install, the way the
# image does (the Dockerfile's build stage runs this script):
#
#   deploy/release.sh [OUT]        # default: dist/pinplan
#
# static (CGO_ENABLED=0), -trimpath (no local paths in the binary), and
# stamped by the Go toolchain from git: the version is the tag of the
# commit, or a pseudo-version naming it (+dirty with local changes), and
# `pinplan -version` prints it with the commit. GOOS and GOARCH
# cross-compile as usual. Checked by TestReleaseBuild (deploy/).
set -eu
out=${1:-dist/pinplan}
case $out in
/*) ;;
*) out=$PWD/$out ;;
esac
cd "$(dirname "$0")/.."
# -buildvcs=true overrides a GOFLAGS=-buildvcs=false in the environment;
# outside a git checkout (a source archive) there is no commit to stamp.
vcs=true
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	echo "release.sh: not a git checkout: the binary will not name its commit" >&2
	vcs=false
fi
echo "release.sh: building $out (go build, static, -trimpath; a minute or two the first time)" >&2
CGO_ENABLED=0 go build -trimpath -buildvcs=$vcs -ldflags='-s -w' -o "$out" ./cmd/bot

#!/usr/bin/env bash
# dev/build-times.sh: how long an edit takes to become a binary and a test target.
#
# Owns:     nothing; edits one source file per layer (appends an unused function, so the crate's
#           code and metadata change as in a real edit) and restores it afterwards.
# Receives: [DIR] a checkout (default: this one), built once before (`cargo build -p rkubelet
#           --bin rkubelet` and `cargo build --workspace --tests`) so only the edit is measured;
#           env CARGO_TARGET_DIR as cargo reads it.
# Emits:    one line per (file, target): `<file> <target> <seconds>`, dev profile, on this
#           machine's cores. docs/architecture.md records the figures.
#
# Files: the HTTP server (top layer), the runtime manager (pods) and the volume manager (node),
# wherever the checkout keeps them (one crate before issue 29, layer crates after). The test
# target is the one a developer iterates on: the test binaries of the crate holding the file.
set -euo pipefail
DIR=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$DIR"
command -v cargo >/dev/null || PATH=$HOME/.cargo/bin:$PATH
export CARGO_TERM_COLOR=never

# The package whose src/ holds FILE.
package_of() {
	local d
	d=$(dirname "$1")
	while [[ $d != . && ! -f $d/Cargo.toml ]]; do d=$(dirname "$d"); done
	sed -n 's/^name = "\(.*\)"/\1/p' "$d/Cargo.toml" | head -n 1
}

timed() {
	local t0 t1
	t0=$(date +%s.%N)
	"$@" >/dev/null 2>&1 || { echo "build failed: $*" >&2; exit 1; }
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }'
}

SAVED=$(mktemp)
FILE=""
restore() { [[ -z $FILE ]] || cp "$SAVED" "$FILE"; rm -f "$SAVED"; }
trap restore EXIT
# edit N: one more unused function at the end of $FILE.
edit() { printf '\n#[allow(dead_code)]\nfn build_times_probe_%s() {}\n' "$1" >>"$FILE"; }

for rel in server/mod.rs kuberuntime/sync.rs volumes/mod.rs; do
	FILE=$(find crates -path "*/src/$rel" | head -n 1)
	[[ -n $FILE ]] || { echo "no $rel under crates/" >&2; exit 1; }
	cp "$FILE" "$SAVED"
	pkg=$(package_of "$FILE")
	cargo build -p rkubelet --bin rkubelet >/dev/null 2>&1
	cargo build -p "$pkg" --tests >/dev/null 2>&1
	edit 1
	printf '%s binary %s\n' "$FILE" "$(timed cargo build -p rkubelet --bin rkubelet)"
	edit 2
	printf '%s tests(%s) %s\n' "$FILE" "$pkg" "$(timed cargo build -p "$pkg" --tests)"
	cp "$SAVED" "$FILE"
done
FILE=""

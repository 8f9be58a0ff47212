#!/usr/bin/env bash
# dev/build-times.sh: how long an edit takes to become a binary and a test target.
#
# Owns:     nothing; touches (mtime only) one source file per layer and restores nothing else.
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

cargo build -p rkubelet --bin rkubelet >/dev/null 2>&1
for rel in server/mod.rs kuberuntime/sync.rs volumes/mod.rs; do
	file=$(find crates -path "*/src/$rel" | head -n 1)
	[[ -n $file ]] || { echo "no $rel under crates/" >&2; exit 1; }
	pkg=$(package_of "$file")
	cargo build -p "$pkg" --tests >/dev/null 2>&1
	touch "$file"
	printf '%s binary %s\n' "$file" "$(timed cargo build -p rkubelet --bin rkubelet)"
	touch "$file"
	printf '%s tests(%s) %s\n' "$file" "$pkg" "$(timed cargo build -p "$pkg" --tests)"
done

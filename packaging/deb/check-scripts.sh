#!/bin/sh
# Runs the rkubelet maintainer scripts (postinst, prerm, postrm) against stand-in binaries
# inside a private mount namespace: /usr/bin is an overlay and the dpkg and alternatives
# databases are copies, so the host is not changed. Needs root and overlayfs. Not run by CI;
# run it after changing the scripts: `sh packaging/deb/check-scripts.sh`.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" != inside ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/up" "$tmp/work" "$tmp/dpkg" "$tmp/alt"
    cp -a /var/lib/dpkg/. "$tmp/dpkg/"
    cp -a /etc/alternatives/. "$tmp/alt/"
    TMP=$tmp unshare --mount --propagation private sh "$here/check-scripts.sh" inside
    echo "maintainer scripts: ok"
    exit 0
fi

mount -t overlay overlay -o "lowerdir=/usr/bin,upperdir=$TMP/up,workdir=$TMP/work" /usr/bin
mount --bind "$TMP/dpkg" /var/lib/dpkg
mount --bind "$TMP/alt" /etc/alternatives
stub() { printf '#!/bin/sh\necho %s\n' "$2" >"$1" && chmod +x "$1"; }
expect() {
    got=$(kubelet 2>/dev/null || echo none)
    [ "$got" = "$1" ] || { echo "FAIL ($2): /usr/bin/kubelet runs '$got', expected '$1'" >&2; exit 1; }
}
quiet() { "$@" >/dev/null 2>&1; }

# A kubeadm node: the Go kubelet from the kubernetes packages, a plain file.
rm -f /usr/bin/kubelet /usr/bin/rkubelet
stub /usr/bin/kubelet go
stub /usr/bin/rkubelet rust
quiet "$here/postinst" configure
expect go "installing rkubelet keeps the Go kubelet"
[ -f /usr/bin/kubelet.kubernetes ] || { echo "FAIL: Go kubelet not diverted" >&2; exit 1; }
quiet "$here/postinst" configure 0.1.0
expect go "upgrading rkubelet keeps the choice"
quiet update-alternatives --set kubelet /usr/bin/rkubelet
expect rust "update-alternatives --set selects rkubelet"
quiet "$here/postinst" configure 0.1.0
expect rust "upgrading rkubelet keeps the operator's choice"
quiet "$here/prerm" remove
rm /usr/bin/rkubelet
quiet "$here/postrm" remove
expect go "removing rkubelet restores the Go kubelet"
[ ! -L /usr/bin/kubelet ] && [ ! -e /usr/bin/kubelet.kubernetes ] ||
    { echo "FAIL: /usr/bin/kubelet not restored as a plain file" >&2; exit 1; }
if dpkg-divert --list /usr/bin/kubelet | grep -q rkubelet; then
    echo "FAIL: diversion left behind" >&2
    exit 1
fi

# A node without the Go kubelet: rkubelet is the only alternative.
rm -f /usr/bin/kubelet
stub /usr/bin/rkubelet rust
quiet "$here/postinst" configure
expect rust "rkubelet alone provides /usr/bin/kubelet"
quiet "$here/prerm" remove
rm /usr/bin/rkubelet
quiet "$here/postrm" purge
[ ! -e /usr/bin/kubelet ] || { echo "FAIL: /usr/bin/kubelet left behind" >&2; exit 1; }

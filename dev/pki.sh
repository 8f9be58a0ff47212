#!/usr/bin/env bash
# dev/pki.sh DIR: the dev node's certificates, so its HTTPS port (10250) admits only their holder.
#
# Owns:     DIR (mode 0700) with ca.{crt,key} (the dev CA, `clientCAFile`), kubelet.{crt,key}
#           (serving certificate for 127.0.0.1 and localhost, `tlsCertFile`/`tlsPrivateKeyFile`)
#           and admin.{crt,key} (client certificate CN=rkubelet-dev-admin, O=system:masters).
# Receives: DIR (dev/run.sh passes $RKUBELET_DEV_DIR/pki). Installs openssl with apt if missing.
# Emits:    nothing on stdout; keeps existing files while they are valid for another day, else
#           makes a new set. Keys are 0600: only the user who ran dev/run.sh (root) can present
#           the client certificate, so no other local user can reach /run, /exec or /pods.
#
#   curl --cacert DIR/ca.crt --cert DIR/admin.crt --key DIR/admin.key https://127.0.0.1:10250/pods
set -euo pipefail

log() { printf '[pki.sh] %s\n' "$*" >&2; }
die() {
	printf '[pki.sh] ERROR: %s\n' "$*" >&2
	exit 1
}

(($# == 1)) || die "usage: dev/pki.sh DIR"
DIR=$1

if ! command -v openssl >/dev/null; then
	command -v apt-get >/dev/null || die "openssl is missing and apt-get is not available"
	log "installing openssl"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 || die "apt-get update failed"
	apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends openssl >&2 ||
		die "apt-get install openssl failed"
fi

umask 077
mkdir -p "$DIR"
[[ -d $DIR && ! -L $DIR ]] || die "$DIR is not a directory"
[[ $(stat -c %u "$DIR") == "$(id -u)" ]] || die "$DIR is not owned by $(id -un); remove it"
chmod 0700 "$DIR"
cd "$DIR"

valid() {
	local f
	for f in ca.crt ca.key kubelet.crt kubelet.key admin.crt admin.key; do
		[[ -f $f && ! -L $f ]] || return 1
	done
	openssl x509 -in kubelet.crt -noout -checkend 86400 >/dev/null 2>&1 &&
		openssl x509 -in admin.crt -noout -checkend 86400 >/dev/null 2>&1 &&
		openssl verify -CAfile ca.crt kubelet.crt admin.crt >/dev/null 2>&1
}
if valid; then
	exit 0
fi

log "making the dev CA, serving and client certificates in $DIR"
rm -f ca.* kubelet.* admin.* ./*.csr ./*.ext ./*.srl
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
key ca.key
openssl req -x509 -new -key ca.key -out ca.crt -days 365 -subj /CN=rkubelet-dev-ca \
	-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
sign() { # NAME SUBJECT EXTENSIONS
	key "$1.key"
	openssl req -new -key "$1.key" -out "$1.csr" -subj "$2"
	printf '%s\n' "$3" >"$1.ext"
	openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
		-extfile "$1.ext" -out "$1.crt" 2>/dev/null
	rm -f "$1.csr" "$1.ext"
}
sign kubelet /CN=rkubelet-dev \
	"$(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost')"
sign admin "/CN=rkubelet-dev-admin/O=system:masters" \
	"$(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth')"
rm -f ca.srl
chmod 0600 ./*.key
chmod 0644 ./*.crt

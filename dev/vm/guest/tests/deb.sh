# Guest test: the Debian package for real. `dpkg -i` of the .deb that `cargo deb` built on the
# host: with a Go kubelet already at /usr/bin/kubelet (a stand-in script), the maintainer
# scripts divert it to /usr/bin/kubelet.kubernetes and keep it the chosen alternative (installing
# rkubelet never changes which kubelet runs); `update-alternatives --set kubelet
# /usr/bin/rkubelet` switches; the packaged example unit runs the installed binary under
# systemd (READY=1); `dpkg --purge` puts the Go kubelet back.
# shellcheck shell=bash
. /mnt/share/guest/lib.sh
set -u
deb=$(ls "$S"/deb/rkubelet_*.deb 2>/dev/null | head -n1)
[[ -n $deb ]] || fail "no .deb in the share (dev/vm.sh builds it with cargo deb when this test runs)"
log "package: $(dpkg-deb -f "$deb" Package Version Architecture Depends | tr '\n' ' ')"
rm -f /usr/bin/kubelet /usr/bin/rkubelet
printf '#!/bin/sh\necho go-kubelet "$@"\n' >/usr/bin/kubelet
chmod 0755 /usr/bin/kubelet
dpkg -i "$deb" || fail "dpkg -i $deb failed"
expect "diversion of /usr/bin/kubelet" /usr/bin/kubelet.kubernetes "$(dpkg-divert --truename /usr/bin/kubelet)"
expect "the chosen kubelet after install (still the Go one)" /usr/bin/kubelet.kubernetes "$(readlink -f /usr/bin/kubelet)"
[[ $(/usr/bin/kubelet --version) == go-kubelet* ]] || fail "/usr/bin/kubelet is not the Go stand-in after install"
update-alternatives --set kubelet /usr/bin/rkubelet || fail "update-alternatives --set kubelet /usr/bin/rkubelet failed"
expect "the chosen kubelet after --set" /usr/bin/rkubelet "$(readlink -f /usr/bin/kubelet)"
ver=$(/usr/bin/kubelet --version) || fail "/usr/bin/kubelet --version failed"
[[ $ver == Kubernetes\ v* ]] || fail "kubelet --version printed '$ver'"
log "ok: /usr/bin/kubelet --version: $ver"
# The packaged unit, as shipped in the examples, runs the packaged binary.
start_containerd systemd
install -m 0644 /usr/share/doc/rkubelet/examples/kubelet.service /etc/systemd/system/kubelet.service
standalone_unit < <(standalone_config systemd)
start_kubelet_unit
static_pod deb-pod '{}'
wait_for 240 "deb-pod Running under the packaged kubelet" pod_running deb-pod
pid=$(systemctl show kubelet -p MainPID --value)
expect "the unit's process" /usr/bin/rkubelet "$(readlink /proc/$pid/exe)"
rm -f "$MANIFESTS/deb-pod.json"
wait_for 120 "deb-pod gone" pod_gone deb-pod
systemctl stop kubelet
dpkg --purge rkubelet || fail "dpkg --purge rkubelet failed"
[[ ! -e /usr/bin/rkubelet ]] || fail "/usr/bin/rkubelet still there after purge"
[[ $(/usr/bin/kubelet --version) == go-kubelet* ]] || fail "the Go kubelet is not back at /usr/bin/kubelet after purge"
[[ -z $(dpkg-divert --list /usr/bin/kubelet) ]] || fail "diversion left after purge: $(dpkg-divert --list /usr/bin/kubelet)"
log "ok: purge restored the Go kubelet"
rm -f /usr/bin/kubelet

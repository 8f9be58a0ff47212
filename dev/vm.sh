#!/usr/bin/env bash
# dev/vm.sh: a real node in a virtual machine — Debian with systemd as PID 1, a pure cgroup v2
# hierarchy, systemd-logind and the distribution's containerd — for the guest tests.
#
# Owns:     the cache dir $RKUBELET_VM_CACHE (default /var/cache/rkubelet-vm, outside the
#           checkout): QEMU unpacked from Debian's packages (qemu/), guest images keyed by flavour
#           and a hash of their recipe (images/<flavour>-<key>/{rootfs.img,vmlinuz,initrd.img});
#           per run a temporary share directory (removed at exit unless --keep).
# Receives: a command (image | test | shell | purge) and options, see usage below.
# Emits:    the guest's console on stdout; `test` ends with a summary table and exits non-zero
#           when any guest test failed, did not report, or the guest did not boot.
#
# How a run goes: the release binaries (rkubelet, fake-apiserver), the dev images' tars, the
# guest scripts (dev/vm/guest/) and packaging/ are copied into a share that the guest mounts
# over virtio-9p at /mnt/share. The image boots with `-snapshot` (every run starts from the same
# clean disk); the unit rkubelet-guest.service, enabled in the image, runs
# /mnt/share/guest/main.sh, which runs the tests named in /mnt/share/tests and writes one result
# line per test to /mnt/share/out/results, then powers the guest off.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${RKUBELET_VM_CACHE:-/var/cache/rkubelet-vm}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
MIRROR=${RKUBELET_VM_MIRROR:-http://deb.debian.org/debian}
MEM=${RKUBELET_VM_MEM:-2048}
CPUS=${RKUBELET_VM_CPUS:-2}
ACCEL=${RKUBELET_VM_ACCEL:-tcg}
# The whole guest run, boot included (TCG on a loaded 2-core machine is slow).
RUN_TIMEOUT=${RKUBELET_VM_TIMEOUT:-2400}
# One guest test (it fails when it takes longer).
TEST_TIMEOUT=${RKUBELET_VM_TEST_TIMEOUT:-900}

# Tests: the CI smoke set (`test`) and the rest (`test --full`). Each names
# dev/vm/guest/tests/<name>.sh. `shutdown` powers the guest off, so it always runs last.
SMOKE_TESTS=(systemd-qos shutdown)
FULL_TESTS=(systemd-qos cgroupfs-qos oom notify-unit deb eviction shutdown)
TRIXIE_EXTRA=(evented-pleg)

# Guest packages (the image's recipe: changing them rebuilds the image).
PACKAGES_COMMON=(systemd-sysv dbus libpam-systemd udev kmod containerd runc iptables
	containernetworking-plugins busybox-static initramfs-tools linux-image-amd64 iproute2 procps
	e2fsprogs curl jq ca-certificates util-linux)
# Bump when build_image changes in a way the package list does not show.
IMAGE_RECIPE=1

log() { printf '[vm.sh] %s\n' "$*" >&2; }
die() {
	printf '[vm.sh] ERROR: %s\n' "$*" >&2
	exit 1
}
on_err() { printf '[vm.sh] ERROR: command failed (status %s) at line %s: %s\n' "$1" "$2" "$3" >&2; }
trap 'on_err "$?" "$LINENO" "$BASH_COMMAND"' ERR

usage() {
	cat >&2 <<'EOF'
usage: dev/vm.sh image|test|shell|purge [options]

  image   build the guest image (cached; ~3 min the first time)
  test    boot the guest and run the guest tests; exit 1 if any failed or the guest did not boot
  shell   boot the guest with a root shell on this terminal (Ctrl-A X quits QEMU)
  purge   delete the cache dir (QEMU and every image)

options:
  --flavour bookworm|trixie   Debian 12 (default; containerd 1.6) or Debian 13 (containerd 1.7)
  --full                      test: every guest test, not only the CI smoke set
  --only NAME                 test: only this test (repeatable); names: dev/vm/guest/tests/*.sh
  --no-build                  use target/release/{rkubelet,fake-apiserver} as they are
  --keep                      keep the share dir (guest logs under out/) and print its path

env: RKUBELET_VM_CACHE (default /var/cache/rkubelet-vm), RKUBELET_VM_MIRROR (Debian mirror),
     RKUBELET_VM_ACCEL (tcg | kvm; default tcg: this machine's /dev/kvm runs no stock kernel),
     RKUBELET_VM_MEM (MiB, 2048), RKUBELET_VM_CPUS (2), RKUBELET_VM_TIMEOUT (seconds, 2400)
EOF
}

# ---------------------------------------------------------------------------------------------
# QEMU: Debian 12's qemu-system-x86 conflicts with the backported qemu-utils some machines have,
# so its packages are unpacked into the cache instead of installed.

# The guest image's tools; QEMU's own libraries come from its packages' Depends (deps_of).
HOST_DEPS=(debootstrap e2fsprogs seabios ipxe-qemu)

apt_install() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	log "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	local opts=(-o DPkg::Lock::Timeout=300)
	apt-get "${opts[@]}" update -qq >&2 || die "apt-get update failed"
	apt-get "${opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
		die "apt-get install ${missing[*]} failed"
}

QEMU=
QEMU_DATA=()
# deps_of DEB...: the packages the given .debs depend on (first alternative, no versions),
# without the qemu-system-* packages unpacked beside them.
deps_of() {
	local f
	for f in "$@"; do dpkg-deb -f "$f" Depends; done | tr ',' '\n' | sed -E 's/\|.*//; s/\(.*\)//; s/:any//; s/[[:space:]]//g' |
		grep -v -E '^(qemu-system-|$)' | sort -u
}

ensure_qemu() {
	apt_install "${HOST_DEPS[@]}"
	if command -v qemu-system-x86_64 >/dev/null; then
		QEMU=$(command -v qemu-system-x86_64)
		return 0
	fi
	local dir=$CACHE/qemu
	if [[ ! -x $dir/usr/bin/qemu-system-x86_64 || ! -f $dir/deps ]]; then
		log "unpacking qemu-system-x86 from Debian's packages into $dir"
		local dl f
		dl=$(mktemp -d "$CACHE/dl.XXXXXX")
		(cd "$dl" && apt-get download qemu-system-x86 qemu-system-common qemu-system-data >&2) ||
			die "apt-get download qemu-system-x86 failed"
		rm -rf "$dir.new"
		mkdir -p "$dir.new"
		for f in "$dl"/*.deb; do dpkg-deb -x "$f" "$dir.new"; done
		deps_of "$dl"/*.deb >"$dir.new/deps"
		rm -rf "$dl" "$dir"
		mv "$dir.new" "$dir"
	fi
	local deps
	mapfile -t deps <"$dir/deps"
	apt_install "${deps[@]}"
	QEMU=$dir/usr/bin/qemu-system-x86_64
	QEMU_DATA=(-L "$dir/usr/share/qemu" -L /usr/share/seabios)
	"$QEMU" --version >/dev/null || die "$QEMU does not run (missing libraries? ldd $QEMU)"
	if ldd "$QEMU" | grep -q 'not found'; then
		die "$QEMU lacks libraries: $(ldd "$QEMU" | grep 'not found' | tr '\n' ' ')"
	fi
}

# ---------------------------------------------------------------------------------------------
# The guest image

suite_of() {
	case $1 in
	bookworm | trixie) echo "$1" ;;
	*) die "unknown flavour '$1' (bookworm or trixie)" ;;
	esac
}

image_key() {
	{
		echo "recipe=$IMAGE_RECIPE flavour=$FLAVOUR mirror=$MIRROR"
		echo "${PACKAGES_COMMON[*]}"
		declare -f build_image configure_rootfs
	} | sha256sum | cut -c1-16
}

IMAGE_DIR=
ensure_image() {
	IMAGE_DIR=$CACHE/images/$FLAVOUR-$(image_key)
	if [[ -f $IMAGE_DIR/done ]]; then
		return 0
	fi
	build_image
}

# configure_rootfs DIR: everything the guest needs beyond its packages.
configure_rootfs() {
	local r=$1
	echo rkubelet-vm >"$r/etc/hostname"
	printf '127.0.0.1\tlocalhost\n127.0.1.1\trkubelet-vm\n' >"$r/etc/hosts"
	cat >"$r/etc/fstab" <<'EOF'
/dev/vda	/	ext4	defaults,errors=remount-ro	0	1
share	/mnt/share	9p	trans=virtio,version=9p2000.L,msize=1048576,cache=none,nofail,x-systemd.device-timeout=30s	0	0
EOF
	mkdir -p "$r/mnt/share"
	chroot "$r" passwd -d root >/dev/null
	# A root shell on the serial console for `dev/vm.sh shell`.
	mkdir -p "$r/etc/systemd/system/serial-getty@ttyS0.service.d"
	cat >"$r/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf" <<'EOF'
[Service]
ExecStart=
ExecStart=-/sbin/agetty --autologin root --keep-baud 115200,57600,38400,9600 %I $TERM
EOF
	# The test runner: runs only when the kernel command line asks for it.
	cat >"$r/etc/systemd/system/rkubelet-guest.service" <<'EOF'
[Unit]
Description=rkubelet guest tests (dev/vm.sh test)
ConditionKernelCommandLine=rkubelet.guest=test
RequiresMountsFor=/mnt/share
After=containerd.service systemd-logind.service dbus.service local-fs.target
[Service]
Type=simple
ExecStart=/bin/bash /mnt/share/guest/main.sh
StandardOutput=journal+console
StandardError=journal+console
[Install]
WantedBy=multi-user.target
EOF
	ln -sf /etc/systemd/system/rkubelet-guest.service \
		"$r/etc/systemd/system/multi-user.target.wants/rkubelet-guest.service"
	# containerd starts when a test has written its configuration, not at boot.
	rm -f "$r/etc/systemd/system/multi-user.target.wants/containerd.service"
	# Nothing in the guest needs these; they only slow the boot down.
	local u
	for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
		ln -sf /dev/null "$r/etc/systemd/system/$u"
	done
	# A small initrd: the root disk needs only these.
	printf 'virtio_pci\nvirtio_blk\next4\n' >"$r/etc/initramfs-tools/modules"
	sed -i 's/^MODULES=.*/MODULES=list/' "$r/etc/initramfs-tools/initramfs.conf"
	mount -t proc proc "$r/proc"
	chroot "$r" update-initramfs -u -k all >&2 || {
		umount "$r/proc"
		die "update-initramfs in the guest root failed"
	}
	umount "$r/proc"
	rm -rf "$r/var/cache/apt/archives/"*.deb "$r/var/lib/apt/lists/"*
}

build_image() {
	local work suite t0=$SECONDS
	suite=$(suite_of "$FLAVOUR")
	mkdir -p "$CACHE/images"
	work=$(mktemp -d "$CACHE/images/build-$FLAVOUR.XXXXXX")
	log "building the $FLAVOUR guest image in $work (debootstrap from $MIRROR, ~3 min)"
	local pkgs
	pkgs=$(
		IFS=,
		echo "${PACKAGES_COMMON[*]}"
	)
	debootstrap --variant=minbase --include="$pkgs" "$suite" "$work/root" "$MIRROR" \
		>"$work/debootstrap.log" 2>&1 || {
		tail -n 30 "$work/debootstrap.log" >&2
		die "debootstrap $suite failed (log: $work/debootstrap.log)"
	}
	configure_rootfs "$work/root"
	cp "$work/root/boot/"vmlinuz-* "$work/vmlinuz"
	cp "$work/root/boot/"initrd.img-* "$work/initrd.img"
	local size
	size=$(($(du -sm "$work/root" | cut -f1) + 2048))
	mkfs.ext4 -q -L rkubelet-vm -d "$work/root" "$work/rootfs.img" "${size}M" >&2 ||
		die "mkfs.ext4 -d failed"
	rm -rf "$work/root"
	local dest
	dest=$CACHE/images/$FLAVOUR-$(image_key)
	rm -rf "$dest"
	mv "$work" "$dest"
	touch "$dest/done"
	IMAGE_DIR=$dest
	log "image ready in $((SECONDS - t0))s: $dest"
	# Older images of this flavour are kept only until the next build.
	local old
	for old in "$CACHE/images/$FLAVOUR"-*; do
		[[ $old == "$dest" ]] || rm -rf "$old"
	done
}

# ---------------------------------------------------------------------------------------------
# A run

SHARE=
KEEP=0
prepare_share() {
	local tests=("$@") t
	SHARE=$(mktemp -d /tmp/rkubelet-vm.XXXXXX)
	mkdir -p "$SHARE/bin" "$SHARE/images" "$SHARE/out"
	cp "$TARGET/release/rkubelet" "$TARGET/release/fake-apiserver" "$SHARE/bin/"
	local imgs
	imgs=$("$ROOT/dev/runtime.sh" images | tail -n1)
	cp "$imgs/pause.tar" "$imgs/busybox.tar" "$SHARE/images/"
	cp -r "$HERE/vm/guest" "$SHARE/guest"
	cp -r "$ROOT/packaging" "$SHARE/packaging"
	for t in "${tests[@]}"; do
		[[ -f $HERE/vm/guest/tests/$t.sh ]] || die "no guest test '$t' (dev/vm/guest/tests/$t.sh)"
		if [[ $t == deb ]]; then build_deb "$SHARE/deb"; fi
	done
	printf '%s\n' "${tests[@]}" >"$SHARE/tests"
	echo "$FLAVOUR" >"$SHARE/flavour"
	echo "$TEST_TIMEOUT" >"$SHARE/test-timeout"
	chmod -R a+rX "$SHARE"
}

# build_deb DIR: the package as `cargo deb` makes it (installing cargo-deb from crates.io when
# missing), from the release binary already built; the packaging test installs it in the guest.
build_deb() {
	if ! (cd "$ROOT" && cargo deb --version >/dev/null 2>&1); then
		log "installing cargo-deb (cargo install cargo-deb --locked)"
		cargo install cargo-deb --locked >&2 || die "cargo install cargo-deb failed"
	fi
	mkdir -p "$1"
	(cd "$ROOT" && cargo deb -p rkubelet --profile release --no-build --output "$1" >&2) ||
		die "cargo deb -p rkubelet failed"
}

cleanup() {
	if [[ -n $SHARE && -d $SHARE ]]; then
		if ((KEEP)); then
			log "kept the share: $SHARE (guest logs in $SHARE/out)"
		else
			rm -rf "$SHARE"
		fi
	fi
}

# boot MODE: run QEMU until the guest powers off (or the run times out).
boot() {
	local mode=$1 accel
	case $ACCEL in
	tcg) accel=(-accel tcg,thread=multi -cpu max) ;;
	kvm) accel=(-accel kvm -cpu host) ;;
	*) die "RKUBELET_VM_ACCEL must be tcg or kvm, not $ACCEL" ;;
	esac
	local args=(
		"${QEMU_DATA[@]}" "${accel[@]}" -machine q35 -smp "$CPUS" -m "$MEM"
		-kernel "$IMAGE_DIR/vmlinuz" -initrd "$IMAGE_DIR/initrd.img"
		-append "root=/dev/vda rw console=ttyS0 panic=-1 systemd.unified_cgroup_hierarchy=1 systemd.show_status=0 rkubelet.guest=$mode"
		-drive "file=$IMAGE_DIR/rootfs.img,format=raw,if=virtio,snapshot=on"
		-virtfs "local,path=$SHARE,mount_tag=share,security_model=none,id=share"
		-nic none -display none -no-reboot
	)
	if [[ $mode == shell ]]; then
		"$QEMU" "${args[@]}" -serial mon:stdio
	else
		timeout --foreground -k 10 "$RUN_TIMEOUT" "$QEMU" "${args[@]}" -serial stdio </dev/null
	fi
}

cmd_test() {
	local tests=() t0=$SECONDS rc=0
	if ((${#ONLY[@]})); then
		tests=("${ONLY[@]}")
	elif ((FULL)); then
		tests=("${FULL_TESTS[@]}")
		if [[ $FLAVOUR == trixie ]]; then tests=("${TRIXIE_EXTRA[@]}" "${tests[@]}"); fi
	else
		tests=("${SMOKE_TESTS[@]}")
	fi
	prepare_share "${tests[@]}"
	log "booting the $FLAVOUR guest ($ACCEL, $CPUS CPUs, $MEM MiB) for: ${tests[*]}"
	boot test || rc=$?
	local status=$SHARE/out/results
	echo
	log "guest run ended after $((SECONDS - t0))s (QEMU status $rc)"
	if ((rc == 124 || rc == 137)); then
		log "the guest did not finish within ${RUN_TIMEOUT}s (RKUBELET_VM_TIMEOUT)"
	fi
	if [[ ! -s $SHARE/out/booted ]]; then
		log "FAIL: the guest never started its test runner (did it boot? console above)"
		return 1
	fi
	local failed=0 t line
	printf '\n========== guest tests (%s) ==========\n' "$FLAVOUR"
	for t in "${tests[@]}"; do
		line=$(awk -v t="$t" '$2 == t' "$status" 2>/dev/null | tail -n1)
		if [[ -z $line ]]; then
			printf '  %-8s %s (no result: the guest stopped or timed out before it ended)\n' MISSING "$t"
			failed=1
		else
			printf '  %s\n' "$line"
			[[ $line == PASS* || $line == SKIP* ]] || failed=1
		fi
	done
	if ((failed)); then
		echo "dev/vm.sh: FAILED"
		return 1
	fi
	echo "dev/vm.sh: ALL GUEST TESTS PASSED"
}

# ---------------------------------------------------------------------------------------------

CMD=${1:-}
[[ -n $CMD ]] && shift
FLAVOUR=bookworm
FULL=0
BUILD=1
ONLY=()
while (($#)); do
	case $1 in
	--flavour) FLAVOUR=${2:?--flavour needs a value}; shift 2 ;;
	--flavour=*) FLAVOUR=${1#*=}; shift ;;
	--full) FULL=1; shift ;;
	--only) ONLY+=("${2:?--only needs a test name}"); shift 2 ;;
	--no-build) BUILD=0; shift ;;
	--keep) KEEP=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage; exit 2 ;;
	esac
done
suite_of "$FLAVOUR" >/dev/null

build_binaries() {
	if ((BUILD)); then
		log "cargo build --release -p rkubelet -p fake-apiserver"
		(cd "$ROOT" && cargo build --release -p rkubelet -p fake-apiserver >&2) ||
			die "cargo build --release failed"
	fi
	local b
	for b in rkubelet fake-apiserver; do
		[[ -x $TARGET/release/$b ]] || die "target/release/$b missing (build it or drop --no-build)"
	done
}

case $CMD in
image | test | shell)
	[[ $(id -u) == 0 ]] || die "dev/vm.sh $CMD must run as root (debootstrap, mkfs, chroot)"
	mkdir -p "$CACHE"
	ensure_qemu
	ensure_image
	[[ $CMD == image ]] && exit 0
	build_binaries
	trap cleanup EXIT
	if [[ $CMD == shell ]]; then
		prepare_share
		log "root shell on the guest console; 'poweroff' or Ctrl-A X ends it; share at /mnt/share"
		boot shell
	else
		cmd_test
	fi
	;;
purge)
	log "deleting $CACHE"
	rm -rf "$CACHE"
	;;
*)
	usage
	exit 2
	;;
esac

#!/usr/bin/env bash
# package-test.sh DEB: install DEB into a clean Debian root (no compiler, nothing of the
# build host) with apt, which must resolve its dependencies from Debian's packages,
# and run `ddioscope doctor` there: exit 0 or 1 with its normal output, not a loader
# error. Needs root and Debian's package mirror.
#
# The clean root is debootstrap's minbase of this host's Debian release, made once
# under user/target/pkgtest/base (about 25 s) and copied for every run; the copy,
# its mounts and nothing else are removed at the end.
set -euo pipefail

[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 PACKAGE.deb" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "package-test: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
deb=$(readlink -f "$1")
here=$(cd "$(dirname "$0")/.." && pwd)
work=$here/user/target/pkgtest
base=$work/base
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
# The mirror this host's apt uses (deb822 or one-line sources), else Debian's own.
mirror=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1)
mirror=${mirror:-$(grep -hsE '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}

if [ ! -f "$base/.complete" ]; then
    rm -rf "$base"
    mkdir -p "$work"
    echo "package-test: debootstrap --variant=minbase $suite from $mirror" >&2
    debootstrap --variant=minbase "$suite" "$base" "$mirror" >/dev/null
    cp /etc/resolv.conf "$base/etc/resolv.conf"
    chroot "$base" apt-get update -qq
    touch "$base/.complete"
fi

root=$(mktemp -d "$work/run.XXXXXX")
cleanup() {
    for m in dev sys proc; do
        mountpoint -q "$root/$m" && umount -R "$root/$m"
    done
    rm -rf --one-file-system "$root"
}
trap cleanup EXIT
cp -a "$base/." "$root/"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
# /sys for BTF, the interfaces and the PMUs; /dev for the MSR and perf devices doctor looks at.
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"

in_root() { chroot "$root" "$@"; }

for c in cc gcc clang llc rustc; do
    if in_root sh -c "command -v $c" >/dev/null; then echo "package-test: the clean root has $c" >&2; exit 1; fi
done
cp "$deb" "$root/tmp/ddioscope.deb"
DEBIAN_FRONTEND=noninteractive in_root apt-get install -y -qq --no-install-recommends /tmp/ddioscope.deb >/dev/null
if in_root ldd /usr/bin/ddioscope | grep -q 'not found'; then
    in_root ldd /usr/bin/ddioscope >&2
    echo "package-test: unresolved libraries" >&2
    exit 1
fi
in_root ddioscope --version
set +e
out=$(in_root ddioscope doctor 2>&1)
rc=$?
set -e
echo "$out"
echo "package-test: ddioscope doctor exited $rc"
# 0: recording possible; 1: it is not (its normal verdict line says why).
case $rc in 0|1) ;; *) echo "package-test: doctor failed" >&2; exit 1 ;; esac
grep -q '^recording: ' <<<"$out" || { echo "package-test: doctor gave no verdict" >&2; exit 1; }
! grep -q '^ddioscope: error' <<<"$out" || { echo "package-test: doctor hit an error" >&2; exit 1; }
# What the package installed beside the binary.
for f in /usr/share/man/man1/ddioscope-serve.1.gz /usr/share/bash-completion/completions/ddioscope \
         /lib/systemd/system/ddioscope-serve@.service /usr/share/ddioscope/grafana-dashboard.json; do
    in_root test -s "$f" || { echo "package-test: $f missing" >&2; exit 1; }
done
echo "package-test: ok ($(in_root dpkg-query -W -f '${Package} ${Version}, depends: ${Depends}' ddioscope))"

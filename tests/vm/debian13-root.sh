#!/bin/bash
# debian13-root.sh ROOT [MIRROR] -- build, once, the Debian 13 (trixie) user space that TLS scenarios run in the
# test VM: nvme-cli 2.13 (`--tls`, `gen-tls-key`, `check-tls-key`, `--concat`), ktls-utils' tlshd (the kernel's TLS
# handshake agent), keyutils, fio. Debian 12, this machine's user space, has nvme-cli 2.3 and no tlshd.
#
# Run by the harness (tests/src/vm/debian13.rs: `Vm::debian13_userspace()`) with ROOT in its cache; by hand:
#   sudo tests/vm/debian13-root.sh ~/.cache/nvmf-rs/vm/debian13-root
# MIRROR defaults to the Debian archive this machine's apt sources name. Needs root and debootstrap (.ci/run installs
# it); about 150 MB downloaded, 260 MB on disk.
#
# Idempotent: ROOT/.ok holds the package list it was built with; a root with the same list is kept as it is (the
# script exits at once, without root), another one is rebuilt. The build goes to ROOT.partial and is renamed into
# place when complete, under a lock (ROOT.lock, flock), so concurrent callers wait for one build and never see half
# of one. Prints ROOT. Inside a guest, tests/vm/debian13-lib.sh chroots into it.
set -euo pipefail
root=${1:?usage: debian13-root.sh ROOT [MIRROR]}
mirror=${2:-}
suite=trixie
# What the scenarios use, and what they need around it (kmod for modprobe, procps and iproute2 to look around).
packages=nvme-cli,ktls-utils,keyutils,fio,kmod,iproute2,procps,util-linux
stamp="$suite $packages"

built() { [[ -f $root/.ok && "$(< "$root/.ok")" == "$stamp" ]]; }
if built; then
  echo "$root"
  exit 0
fi
cannot() { echo "debian13-root.sh: $*" >&2; exit 2; }
[[ $(id -u) == 0 ]] || cannot "building $root needs root (debootstrap)"
command -v debootstrap >/dev/null || cannot "debootstrap not found (apt-get install debootstrap)"
if [[ -z $mirror ]]; then
  # The archive this machine's apt sources name, not its security archive (deb822 first, then one-line entries).
  mirror=$(awk '/^URIs:/ && !/security/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [[ -n $mirror ]] ||
    mirror=$(awk '$1 == "deb" && $3 !~ /-security$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
  [[ -n $mirror ]] || cannot "no Debian archive in /etc/apt/sources.list{,.d}; name a MIRROR"
fi

mkdir -p "$(dirname "$root")"
exec 9> "$root.lock"
flock 9
built && { echo "$root"; exit 0; } # built by another caller while this one waited
partial=$root.partial
rm -rf "$partial"
start=$SECONDS
echo "debian13-root.sh: debootstrap $suite from $mirror into $partial ($packages)" >&2
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
keyring_arg=()
[[ -f $keyring ]] && keyring_arg=(--keyring="$keyring")
if ! debootstrap --variant=minbase "${keyring_arg[@]}" --include="$packages" "$suite" "$partial" "$mirror" \
  > "$root.log" 2>&1; then
  tail -n 20 "$root.log" >&2
  echo "debian13-root.sh: debootstrap failed (its whole log: $root.log)" >&2
  exit 1
fi
# Downloaded packages and package lists are of no use in the guest (the root is rebuilt when its list changes).
rm -rf "$partial"/var/cache/apt/archives/*.deb "$partial"/var/lib/apt/lists/*_*
echo "$stamp" > "$partial/.ok"
rm -rf "$root"
mv "$partial" "$root"
echo "debian13-root.sh: built $root in $((SECONDS - start)) s ($(du -sh "$root" | cut -f1))" >&2
echo "$root"

# Helpers for scenarios in the Debian 13 user space (`Vm::debian13_userspace()`, tests/src/vm/debian13.rs; built by
# tests/vm/debian13-root.sh): nvme-cli 2.13 and ktls-utils' tlshd, for NVMe/TCP over TLS. guest-lib.sh sources this
# file when $NVMF_DEBIAN13_ROOT is set; stage2.sh runs deb13_up before the scenario (a lab node: before its first
# job) and deb13_down after it. The root is this machine's cache folder seen through the guest's overlay: what a
# scenario writes there stays in the guest's tmpfs.
#
#   deb13_up                    bind /dev, /proc and /sys into the root, tmpfs on its /run and /tmp, this guest's
#                               /etc/nvme/hostnqn and hostid into its /etc/nvme (once; stage2.sh runs it)
#   deb13 CMD...                run CMD in the root (chroot), in network namespace $DEB13_NETNS if set
#   nvme13 ARGS...              nvme-cli 2.13 of the root (e.g. DEB13_NETNS=host nvme13 connect ... --tls)
#   keyctl13 ARGS...            keyutils' keyctl of the root
#   tlshd_start NAME [NETNS] [KEYRING...]
#                               tlshd of the root as daemon NAME (log: $(daemon_log NAME)) in network namespace NETNS
#                               ("" or absent: this one), with KEYRINGs (default .nvme; tlshd adds .nvme itself) in
#                               its session keyring, until it listens for handshakes; debug levels $TLSHD_LOGLEVEL
#                               (tlshd's own, default 7) and $TLSHD_TLS_DEBUG (GnuTLS's, default 0; 4 logs the
#                               selected PSK identity and cipher suite)
#   tlshd_stop NAME
#   deb13_down                  stop every tlshd, unmount what deb13_up mounted
#
# NVMe/TCP over TLS 1.3 with a pre-shared key (tests/tests/vm_tls.rs). The kernel host takes the PSK that
# `--tls-key=SERIAL` names, or looks one up by identity in the .nvme keyring (nvme-cli 2.13 does not hand
# `--keyring=NAME` to the kernel: its connect string has no keyring=), and hands its serial to tlshd; nvmet's tlshd
# finds the host's identity in its session keyring, where tlshd always links .nvme. A host and a target with keys
# of their own are two machines: the host in a network namespace of its own with its own tlshd (the handshake upcall
# goes to the tlshd of the socket's namespace) and its key in a keyring of its own, named by serial.
#   tls_keyring_new NAME        a keyring (in the user keyring) that nvme-cli and tlshd use by name; prints its serial
#   tls_keyring_clear [NAME]    remove every key from keyring NAME (default .nvme)
#   tls_psk_insert KEY HOSTNQN SUBNQN [ARGS]
#                               the retained PSK of interchange KEY (NVMeTLSkey-1:0N:...:) for HOSTNQN and SUBNQN
#                               into the .nvme keyring (ARGS: --identity=1, --keyring=NAME); prints "SERIAL IDENTITY"
#                               (SERIAL in hex; --tls-key takes it in decimal: $((16#SERIAL)))
#   tls_key_identity SERIAL     the description of key SERIAL (hex, as /proc/keys has it): the TLS PSK identity
#   tls_psk_hex SERIAL [KEYRING]  the key's payload, the PSK TLS uses, in hex (KEYRING: where it is; .nvme)
#   host_connect_tls ADDR SVCID NQN [ARGS]
#                               kernel host connect with nvme-cli 2.13 `--tls` (in $DEB13_NETNS if set) -> the
#                               namespace's /dev/nvmeXnY (ARGS: --hostnqn=, --hostid=, --tls-key=SERIAL, ...)
#   tls_host_machine NETNS ADDR PEER_ADDR [KEYRING]
#                               a host machine with keys of its own: network namespace NETNS at ADDR, linked to this
#                               one at PEER_ADDR (netns_link), keyring KEYRING (default NETNS) and tlshd-NETNS there
#                               with it; its kernel host connects with DEB13_NETNS=NETNS host_connect_tls PEER_ADDR
#                               ... --tls-key=SERIAL (a key tls_psk_insert put in KEYRING)
#   fio13_rw_verify DEV BS QD SIZE   guest-lib's fio_rw_verify with fio 3.39 of the root
#   nvmet_tls_port (guest-lib.sh) the kernel target's side: a TCP port with addr_tsas tls1.3

: "${NVMF_DEBIAN13_ROOT:?the Debian 13 user space is not in this guest (Vm::debian13_userspace)}"
D13=$NVMF_DEBIAN13_ROOT

deb13_up() {
  [ -e /run/nvmf-deb13/up ] && return 0
  [ -x "$D13/usr/sbin/nvme" ] && [ -x "$D13/usr/sbin/tlshd" ] ||
    { fail "$D13 is not the Debian 13 user space (no nvme, no tlshd)"; return 1; }
  mkdir -p /run/nvmf-deb13
  mount --rbind /dev "$D13/dev" && mount --rbind /proc "$D13/proc" && mount --rbind /sys "$D13/sys" &&
    mount -t tmpfs -o mode=755 tmpfs "$D13/run" && mount -t tmpfs -o mode=1777 tmpfs "$D13/tmp" ||
    { fail "cannot mount /dev, /proc, /sys, /run, /tmp in $D13"; return 1; }
  mkdir -p "$D13/etc/nvme" && cp /etc/nvme/hostnqn /etc/nvme/hostid "$D13/etc/nvme/" ||
    { fail "cannot write $D13/etc/nvme"; return 1; }
  touch /run/nvmf-deb13/up
}

deb13_down() {
  local f m
  [ -e /run/nvmf-deb13/up ] || return 0
  for f in /run/nvmf-deb13/*.tlshd; do
    [ -e "$f" ] && tlshd_stop "$(basename "$f" .tlshd)"
  done
  for m in dev proc sys run tmp; do
    umount -R "$D13/$m" 2>/dev/null || umount -R -l "$D13/$m" 2>/dev/null || log "cannot unmount $D13/$m"
  done
  rm -f /run/nvmf-deb13/up
  return 0
}

deb13() {
  if [ -n "${DEB13_NETNS:-}" ]; then
    ip netns exec "$DEB13_NETNS" chroot "$D13" "$@"
  else
    chroot "$D13" "$@"
  fi
}
nvme13() { deb13 nvme "$@"; }
keyctl13() { deb13 keyctl "$@"; }

tlshd_start() {
  local name=$1 netns=${2:-} conf pid i
  shift $(($# < 2 ? $# : 2))
  local keyrings=("${@:-.nvme}")
  local k joined=
  for k in "${keyrings[@]}"; do joined+="${joined:+;}$k"; done
  conf=/etc/tlshd-$name.conf
  printf '[debug]\nloglevel=%s\ntls=%s\nnl=0\n\n[authenticate]\nkeyrings=%s\n' \
    "${TLSHD_LOGLEVEL:-7}" "${TLSHD_TLS_DEBUG:-0}" "$joined" > "$D13$conf" ||
    { fail "cannot write $D13$conf"; return 1; }
  modprobe tls || { fail "no tls module"; return 1; }
  if [ -n "$netns" ]; then
    start_daemon "$name" ip netns exec "$netns" chroot "$D13" /usr/sbin/tlshd -s -c "$conf"
  else
    start_daemon "$name" chroot "$D13" /usr/sbin/tlshd -s -c "$conf"
  fi
  touch "/run/nvmf-deb13/$name.tlshd"
  read -r pid < "/run/nvmf-daemons/$name.pid"
  # Ready once its netlink socket has joined the handshake service's multicast group: /proc/net/netlink (the
  # daemon's network namespace) lists each socket's first 32 groups. 1.0.0 logs nothing at that point.
  if ! wait_until 20 _tlshd_listening "$pid"; then
    tail -n 20 "$(daemon_log "$name")" >&2
    daemon_report "$name"
    fail "tlshd $name did not join the handshake service's multicast group"
    return 1
  fi
  log "tlshd $name listening (keyrings $joined${netns:+, network namespace $netns})"
}
# _tlshd_listening PID: one of its sockets (socket:[INODE] among its fds; one readlink for all) is a generic netlink
# one (protocol 16) with a group.
_tlshd_listening() {
  local link inode sk eth portid groups rest
  local -A mine=()
  for link in $(readlink /proc/"$1"/fd/* 2>/dev/null); do
    [[ $link == socket:\[*\] ]] || continue
    inode=${link#socket:[}
    inode=${inode%]}
    mine[$inode]=1
  done
  while read -r sk eth portid groups _ _ _ _ _ inode rest; do
    [ "$eth" = 16 ] && [ -n "${mine[$inode]:-}" ] && [ "$groups" != 00000000 ] && return 0
  done < "/proc/$1/net/netlink"
  return 1
}

tlshd_stop() {
  stop_daemon "$1" || true
  rm -f "/run/nvmf-deb13/$1.tlshd"
}

tls_keyring_new() {
  local serial
  serial=$(keyctl13 newring "$1" @u) || { fail "cannot create keyring $1"; return 1; }
  # The user keyring's keys are not possessed by nvme-cli or tlshd (each joins a session keyring of its own):
  # they link and fill it as its owner, which may view, read, write, search, link and set attributes.
  keyctl13 setperm "$serial" 0x3f3f0000 || { fail "cannot open keyring $1 to its owner"; return 1; }
  echo "$serial"
}

tls_keyring_clear() { keyctl13 clear "%:${1:-.nvme}" || { fail "cannot clear keyring ${1:-.nvme}"; return 1; }; }

tls_psk_insert() {
  local key=$1 hostnqn=$2 subnqn=$3 out serial
  shift 3
  out=$(nvme13 check-tls-key --keydata="$key" --hostnqn="$hostnqn" --subsysnqn="$subnqn" --insert "$@") ||
    { fail "nvme check-tls-key --insert $* of $key failed: $out"; return 1; }
  # "Inserted TLS key 3e9e9b07"
  serial=${out##* }
  [[ $serial =~ ^[0-9a-f]+$ ]] || { fail "nvme check-tls-key --insert said: $out"; return 1; }
  echo "$serial $(tls_key_identity "$serial")"
}

# /proc/keys: SERIAL FLAGS USAGE EXPIRY PERM UID GID TYPE DESCRIPTION: SUMMARY (serial in hex, zero-padded to 8).
tls_key_identity() {
  local serial line
  printf -v serial '%08x' "0x$1"
  while read -r line; do
    [[ $line == "$serial "* ]] || continue
    line=${line#* psk }
    line=${line#"${line%%[! ]*}"}
    echo "${line%: *}"
    return 0
  done < /proc/keys
  fail "no key $1 in /proc/keys"
}

# Read as a possessor: a session keyring of its own with the key's keyring linked in (its owner may link it).
tls_psk_hex() {
  deb13 keyctl session - sh -c 'keyctl link "%:$1" @s >/dev/null && keyctl pipe "0x$2"' sh "${2:-.nvme}" "$1" \
    2>/dev/null | od -An -v -tx1 | tr -d ' \n'
  [ "${PIPESTATUS[0]}" = 0 ] || { fail "cannot read key $1"; return 1; }
  echo
}

host_connect_tls() {
  local _NVME_CLI=(chroot "$D13" nvme)
  [ -z "${DEB13_NETNS:-}" ] || _NVME_CLI=(ip netns exec "$DEB13_NETNS" "${_NVME_CLI[@]}")
  host_connect tcp "$1" "$2" "$3" --tls "${@:4}"
}

tls_host_machine() {
  local ns=$1 addr=$2 peer=$3 keyring=${4:-$1}
  netns_link "$ns" "$peer" "$addr" || return 1
  tls_keyring_new "$keyring" > /dev/null || return 1
  tlshd_start "tlshd-$ns" "$ns" "$keyring"
}

fio13_rw_verify() {
  local _FIO=(chroot "$D13" fio)
  fio_rw_verify "$@"
}

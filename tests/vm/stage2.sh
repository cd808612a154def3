# Stage 2 of the test VM (tests/src/vm): runs as root inside the guest, chrooted into the overlay of the host's
# root, stdio on the second serial port. /run/nvmf-vm is the run's control folder (shared with the host):
#   env       settings written by the harness (NVMF_VM_MODULES, NVMF_VM_RXE, NVMF_VM_SIW, NVMF_VM_CWD,
#             NVMF_DEBIAN13_ROOT, exported variables)
#   cmd       the scenario (a bash script; absent for an interactive shell)
#   stderr    where the scenario's stderr goes (stdout goes to the serial port)
#   t-*       guest uptime at each stage, for the boot/run times the harness reports
#   links     a lab node's links (IFNAME MAC ADDR/PREFIX PEER PEER_ADDR); agent.sh its job runner
# Exit status: the scenario's, or 125 when the guest could not be set up as asked.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=${TERM:-dumb}
read -r t _ </proc/uptime && echo "$t" > /run/nvmf-vm/t-stage2
. /run/nvmf-vm/env
export NVMF_VM_GUEST=1 NVMF_GUEST_LIB=/run/nvmf-vm/guest-lib.sh
ctl=/run/nvmf-vm
stty -opost 2>/dev/null # no \n -> \r\n on the serial port
hostname "${NVMF_NODE:-nvmf-vm}"
ip link set lo up
setup_failed() { echo "nvmf-vm: $*" >&2; exit 125; }
if [ -f $ctl/cmd ] || [ "${NVMF_VM_AGENT:-}" = 1 ]; then exec 2>>$ctl/stderr; fi
if [ "$NVMF_VM_TRACE" = 1 ]; then PS4='+ $EPOCHREALTIME '; set -x; fi

# One kmod process for all modules (each exec costs ~0.3 s under TCG), then say which ones are missing.
if [ -n "$NVMF_VM_MODULES" ]; then
  modprobe -a $NVMF_VM_MODULES 2>/dev/null
  for m in $NVMF_VM_MODULES; do
    [ -d /sys/module/${m//-/_} ] || modprobe $m || setup_failed "cannot load module $m"
  done
fi
# Soft-iWARP: the harness's own build of siw.ko (tests/src/vm/siw.rs), its dependencies loaded above.
if [ -n "${NVMF_VM_SIW:-}" ] && [ ! -d /sys/module/siw ]; then
  insmod "$NVMF_VM_SIW" || setup_failed "cannot load $NVMF_VM_SIW"
fi
# configfs is a module on Debian kernels: mount it once nvmet or null_blk has pulled it in.
if [ -d /sys/kernel/config ] && ! mountpoint -q /sys/kernel/config; then
  mount -t configfs configfs /sys/kernel/config 2>/dev/null
fi

# The kernel's configuration where tools look for it (blktests, nvme-cli's checks).
[ -n "${NVMF_VM_KCONFIG:-}" ] && cp "$NVMF_VM_KCONFIG" "/boot/config-$(uname -r)" 2>/dev/null
# A fifo nobody writes: `read -t` on it waits without an exec (each costs 0.3-1 s under TCG); guest-lib's _nap.
mkfifo /run/nvmf-nap 2>/dev/null

# A lab node's links ($ctl/links, one a line: IFNAME MAC ADDR/PREFIX PEER PEER_ADDR): each NIC, found by its MAC,
# renamed IFNAME (eth0, eth1, ... in the node's link order), its address, the peer's name in /etc/hosts, and
# Soft-RoCE rxeK on ethK. NVMF_RDMA_ADDR is the address on the first link.
_links_up() {
  local ifname mac addr peer peer_addr d m k=0 cur
  local -A by_mac=()
  for d in /sys/class/net/*; do read -r m < "$d/address" && by_mac[$m]=${d##*/}; done
  while read -r ifname mac addr peer peer_addr; do
    [ -n "${by_mac[$mac]:-}" ] || return 1
  done < $ctl/links
  # Two passes, so that a NIC the kernel named eth1 can become eth0 while another holds that name.
  while read -r ifname mac _; do
    ip link set "${by_mac[$mac]}" name "nvmftmp$k" || return 2
    k=$((k + 1))
  done < $ctl/links
  k=0
  while read -r ifname mac addr peer peer_addr; do
    cur=nvmftmp$k
    ip link set "$cur" name "$ifname" && ip link set "$ifname" up && ip addr add "$addr" dev "$ifname" || return 2
    echo "$peer_addr $peer" >> /etc/hosts
    if [ "$NVMF_VM_RXE" = 1 ]; then rdma link add "rxe$k" type rxe netdev "$ifname" || return 3; fi
    if [ -n "${NVMF_VM_SIW:-}" ]; then rdma link add "siw$k" type siw netdev "$ifname" || return 3; fi
    [ $k = 0 ] && export NVMF_RDMA_ADDR=${addr%/*}
    k=$((k + 1))
  done < $ctl/links
}
export NVMF_RDMA_ADDR=10.77.0.1
if [ -s $ctl/links ]; then
  [ "$NVMF_VM_RXE" = 1 ] || [ -n "${NVMF_VM_SIW:-}" ] && ulimit -l unlimited
  for _ in $(seq 50); do _links_up && break; rc=$?; [ $rc -gt 1 ] && setup_failed "cannot set up the links (step $rc)"; read -t 0.2 <> /run/nvmf-nap; done
  [ -n "$(ip -o addr show eth0 2>/dev/null)" ] || setup_failed "the link NICs did not appear: $(ls /sys/class/net | tr '\n' ' ')"
elif [ "$NVMF_VM_RXE" = 1 ] || [ -n "${NVMF_VM_SIW:-}" ]; then
  # Soft-RoCE (Soft-iWARP) on a guest-only dummy netdev: rdma_cm does not work over loopback (ENODEV on 127.0.0.1).
  ip link add dummy0 mtu 9000 type dummy && ip addr add $NVMF_RDMA_ADDR/24 dev dummy0 && ip link set dummy0 up ||
    setup_failed "cannot create dummy0"
  if [ "$NVMF_VM_RXE" = 1 ]; then rdma link add rxe0 type rxe netdev dummy0 || setup_failed "cannot create rxe0 on dummy0"; fi
  if [ -n "${NVMF_VM_SIW:-}" ]; then rdma link add siw0 type siw netdev dummy0 || setup_failed "cannot create siw0 on dummy0"; fi
  ulimit -l unlimited
fi

mkdir -p /etc/nvme
# A lone guest keeps this machine's host identity if it has one; each lab node is a machine of its own, with its own.
if [ "${NVMF_VM_AGENT:-}" = 1 ]; then
  read -r uuid < /proc/sys/kernel/random/uuid
  echo "nqn.2014-08.org.nvmexpress:uuid:$uuid" > /etc/nvme/hostnqn
  echo "$uuid" > /etc/nvme/hostid
fi
[ -s /etc/nvme/hostnqn ] || nvme gen-hostnqn > /etc/nvme/hostnqn 2>/dev/null
[ -s /etc/nvme/hostid ] || cat /proc/sys/kernel/random/uuid > /etc/nvme/hostid
# The Debian 13 user space (Vm::debian13_userspace): its chroot's mounts and host identity (debian13-lib.sh).
if [ -n "${NVMF_DEBIAN13_ROOT:-}" ]; then
  (. $NVMF_GUEST_LIB && deb13_up) || setup_failed "cannot set up the Debian 13 user space in $NVMF_DEBIAN13_ROOT"
fi
cd "$NVMF_VM_CWD" 2>/dev/null || cd /

read -r t _ </proc/uptime && echo "$t" > $ctl/t-command
if [ "${NVMF_VM_AGENT:-}" = 1 ]; then
  # A lab node: run the jobs the harness and the other nodes leave in $ctl/jobs until told to power off.
  . $ctl/agent.sh
  status=$?
elif [ -f $ctl/cmd ]; then
  bash $ctl/cmd
  status=$?
  # tlshd stopped first, so that its whole log is collected.
  [ -z "${NVMF_DEBIAN13_ROOT:-}" ] || (. $NVMF_GUEST_LIB && deb13_down) >/dev/null 2>&1
  if [ -n "${NVMF_VM_LOGS:-}" ]; then
    (. $NVMF_GUEST_LIB && collect_logs) >/dev/null 2>&1
  fi
else
  stty sane 2>/dev/null
  [ -n "${NVMF_VM_TTY_SIZE:-}" ] && stty rows ${NVMF_VM_TTY_SIZE% *} cols ${NVMF_VM_TTY_SIZE#* } 2>/dev/null
  export TERM=${NVMF_VM_TERM:-vt100}
  echo "nvmf-vm: interactive shell; the guest helpers: . \$NVMF_GUEST_LIB; power off with Ctrl-D or Ctrl-A X"
  # A new session that opens the serial port makes it its controlling terminal: job control, Ctrl-C.
  setsid -w bash -c 'exec bash -i <>/dev/ttyS1 >&0 2>&1' 
  status=$?
fi
[ -z "${NVMF_DEBIAN13_ROOT:-}" ] || (. $NVMF_GUEST_LIB && deb13_down) >/dev/null 2>&1
read -r t _ </proc/uptime && echo "$t" > $ctl/t-end
exit $status

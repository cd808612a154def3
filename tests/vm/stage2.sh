# Stage 2 of the test VM (tests/src/vm): runs as root inside the guest, chrooted into the overlay of the host's
# root, stdio on the second serial port. /run/nvmf-vm is the run's control folder (shared with the host):
#   env       settings written by the harness (NVMF_VM_MODULES, NVMF_VM_RXE, NVMF_VM_CWD, exported variables)
#   cmd       the scenario (a bash script; absent for an interactive shell)
#   stderr    where the scenario's stderr goes (stdout goes to the serial port)
#   t-*       guest uptime at each stage, for the boot/run times the harness reports
# Exit status: the scenario's, or 125 when the guest could not be set up as asked.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=${TERM:-dumb}
read -r t _ </proc/uptime && echo "$t" > /run/nvmf-vm/t-stage2
. /run/nvmf-vm/env
export NVMF_VM_GUEST=1 NVMF_GUEST_LIB=/run/nvmf-vm/guest-lib.sh
ctl=/run/nvmf-vm
stty -opost 2>/dev/null # no \n -> \r\n on the serial port
hostname nvmf-vm
ip link set lo up
setup_failed() { echo "nvmf-vm: $*" >&2; exit 125; }
if [ -f $ctl/cmd ]; then exec 2>>$ctl/stderr; fi
if [ "$NVMF_VM_TRACE" = 1 ]; then PS4='+ $EPOCHREALTIME '; set -x; fi

# One kmod process for all modules (each exec costs ~0.3 s under TCG), then say which ones are missing.
if [ -n "$NVMF_VM_MODULES" ]; then
  modprobe -a $NVMF_VM_MODULES 2>/dev/null
  for m in $NVMF_VM_MODULES; do
    [ -d /sys/module/${m//-/_} ] || modprobe $m || setup_failed "cannot load module $m"
  done
fi
# configfs is a module on Debian kernels: mount it once nvmet or null_blk has pulled it in.
if [ -d /sys/kernel/config ] && ! mountpoint -q /sys/kernel/config; then
  mount -t configfs configfs /sys/kernel/config 2>/dev/null
fi

# Soft-RoCE on a guest-only dummy netdev: rdma_cm does not work over loopback (ENODEV on 127.0.0.1).
export NVMF_RDMA_ADDR=10.77.0.1
if [ "$NVMF_VM_RXE" = 1 ]; then
  ip link add dummy0 mtu 9000 type dummy && ip addr add $NVMF_RDMA_ADDR/24 dev dummy0 && ip link set dummy0 up ||
    setup_failed "cannot create dummy0"
  rdma link add rxe0 type rxe netdev dummy0 || setup_failed "cannot create rxe0 on dummy0"
  ulimit -l unlimited
fi

mkdir -p /etc/nvme
[ -s /etc/nvme/hostnqn ] || nvme gen-hostnqn > /etc/nvme/hostnqn 2>/dev/null
[ -s /etc/nvme/hostid ] || cat /proc/sys/kernel/random/uuid > /etc/nvme/hostid
cd "$NVMF_VM_CWD" 2>/dev/null || cd /

read -r t _ </proc/uptime && echo "$t" > $ctl/t-command
if [ -f $ctl/cmd ]; then
  bash $ctl/cmd
  status=$?
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
read -r t _ </proc/uptime && echo "$t" > $ctl/t-end
exit $status

#!/bin/busybox sh
# /init of the test VM's initramfs (built by tests/src/vm/initramfs.rs). Busybox only.
# Mounts the host's / (9p tag "hostroot", read-only) under a tmpfs overlay at /mnt/root, the run's control
# folder (9p tag "nvmfctl") at /run/nvmf-vm (a lab node's: its folder in the lab's, mounted at /run/nvmf-lab),
# the shared folders listed in its "shares" file ("CACHE PATH" lines, CACHE the 9p cache mode mmap or none; tags
# share0..N) at their host paths, and the kernel's modules at /lib/modules/$(uname -r); then runs stage2.sh chrooted
# there with its stdio on the second serial port, records the exit status and powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
fail() { echo "nvmf-vm init: $*"; poweroff -f; }
for m in /lib/modules/*.ko; do [ -e "$m" ] || continue; insmod "$m" || echo "nvmf-vm init: insmod $m failed"; done
R=/mnt/root
P9="trans=virtio,version=9p2000.L,msize=524288"
mount -t 9p -o $P9,cache=loose,ro hostroot /mnt/lower || fail "cannot mount the host root over 9p"
mount -t tmpfs -o mode=755 tmpfs /mnt/rw && mkdir -p /mnt/rw/upper /mnt/rw/work
mount -t overlay overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work $R || fail "overlay failed"
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
ln -sf /proc/self/fd $R/dev/fd # bash's process substitution needs /dev/fd; devtmpfs lacks it
ln -sf /proc/self/fd/0 $R/dev/stdin
ln -sf /proc/self/fd/1 $R/dev/stdout
ln -sf /proc/self/fd/2 $R/dev/stderr
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $R/dev/pts
mount -t tmpfs tmpfs $R/dev/shm
mount -t tmpfs -o mode=755 tmpfs $R/run
mount -t debugfs debugfs $R/sys/kernel/debug 2>/dev/null
mkdir -p $R/run/nvmf-vm
# A lab node (kernel parameter nvmf.node=NAME) gets the whole lab folder, every node's control folder in it, at
# /run/nvmf-lab, and its own at /run/nvmf-vm.
NODE=
for o in $(cat /proc/cmdline); do case $o in nvmf.node=*) NODE=${o#nvmf.node=} ;; esac; done
if [ -n "$NODE" ]; then
  mkdir -p $R/run/nvmf-lab
  mount -t 9p -o $P9,cache=none nvmfctl $R/run/nvmf-lab || fail "cannot mount the lab folder"
  mount --bind "$R/run/nvmf-lab/$NODE" $R/run/nvmf-vm || fail "no control folder for node $NODE"
else
  mount -t 9p -o $P9,cache=none nvmfctl $R/run/nvmf-vm || fail "cannot mount the control folder"
fi
. $R/run/nvmf-vm/env
i=0
while read -r cache d; do
  [ -n "$d" ] || continue
  mkdir -p "$R$d" && mount -t 9p -o $P9,cache=$cache "share$i" "$R$d" || echo "nvmf-vm init: cannot mount share $d"
  i=$((i + 1))
done < $R/run/nvmf-vm/shares
K=/lib/modules/$(uname -r)
mkdir -p "$R$K" && mount --bind "/mnt/lower$NVMF_VM_KDIR$K" "$R$K" || fail "cannot bind the guest kernel's modules"
cut -d' ' -f1 /proc/uptime > $R/run/nvmf-vm/t-rootfs
T=/dev/ttyS1
[ -c $T ] || T=/dev/console
chroot $R /bin/bash /run/nvmf-vm/stage2.sh <$T >$T 2>&1
echo $? > $R/run/nvmf-vm/status
sync
umount $R/run/nvmf-vm 2>/dev/null
umount $R/run/nvmf-lab 2>/dev/null
poweroff -f

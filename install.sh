#!/usr/bin/env bash
# Installs nvmf-target and nvmf-host as systemd services: the binaries, the units, their sysusers.d entries, the
# optional passthrough and ublk drop-ins (as documentation, not enabled), the fio job files and example configurations.
#
#   cargo build --release --locked -p nvmf-target -p nvmf-host   # as yourself
#   sudo ./install.sh --no-build                                 # then as root
#   sudo systemctl enable --now nvmf-target   # the default: a 1 GiB file on tcp://127.0.0.1:4420
#   sudoedit /etc/nvmf/target.toml        # then make it yours (every key: share/doc/nvmf/target.toml.example)
#   sudoedit /etc/nvmf/host.toml          # the example connects to 192.0.2.10: edit it first
#   sudo systemctl enable --now nvmf-host
#
# Options:
#   --prefix DIR   where binary, docs and (for /usr and /usr/local) unit and sysusers.d go; default /usr/local
#   --destdir DIR  stage everything under DIR (packaging, tests); no user is created, systemd is not told
#   --no-build     do not run cargo; use target/release/nvmf-target and nvmf-host (or $NVMF_TARGET_BIN, $NVMF_HOST_BIN)
# Environment: NVMF_TARGET_BIN=PATH / NVMF_HOST_BIN=PATH install that binary instead of target/release's.
#
# It never overwrites /etc/nvmf/target.toml or /etc/nvmf/host.toml and never enables or starts a service. A new
# /etc/nvmf/target.toml is systemd/target.toml: loopback only, one sparse 1 GiB file /var/lib/nvmf/default.img
# (created when missing), no block device; the host's is the example, which names an address to edit first.
# See systemd/README.md.
set -euo pipefail
cd "$(dirname "$0")"

prefix=/usr/local
destdir=
build=1
while (($#)); do
  case "$1" in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --destdir) destdir=${2:?--destdir needs a directory}; shift 2 ;;
    --destdir=*) destdir=${1#*=}; shift ;;
    --no-build) build=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$prefix" in /*) ;; *) echo "install.sh: --prefix must be absolute, not '$prefix'" >&2; exit 2 ;; esac
prefix=${prefix%/}

bin=${NVMF_TARGET_BIN:-target/release/nvmf-target}
host_bin=${NVMF_HOST_BIN:-target/release/nvmf-host}
if ((build)) && [[ -z ${NVMF_TARGET_BIN:-} || -z ${NVMF_HOST_BIN:-} ]]; then
  echo "install.sh: cargo build --release --locked -p nvmf-target -p nvmf-host"
  cargo build --release --locked -p nvmf-target -p nvmf-host
fi
[[ -x $bin ]] || { echo "install.sh: $bin is missing: build it (cargo build --release -p nvmf-target)" >&2; exit 1; }
[[ -x $host_bin ]] || { echo "install.sh: $host_bin is missing: build it (cargo build --release -p nvmf-host)" >&2; exit 1; }

# Units and sysusers.d go where systemd looks for vendor files when the prefix is one it searches
# (/usr/lib, /usr/local/lib); any other prefix gets the administrator's directories under /etc.
case "$prefix" in
  /usr | /usr/local) unitdir=$prefix/lib/systemd/system; sysusersdir=$prefix/lib/sysusers.d ;;
  *) unitdir=/etc/systemd/system; sysusersdir=/etc/sysusers.d ;;
esac
docdir=$prefix/share/doc/nvmf
D=$destdir

install -D -m 0755 "$bin" "$D$prefix/bin/nvmf-target"
# The unit names /usr/local/bin/nvmf-target and the doc path; rewrite both for another prefix.
install -d -m 0755 "$D$unitdir"
sed -e "s#/usr/local/bin/nvmf-target#$prefix/bin/nvmf-target#g" -e "s#/usr/local/share/doc/nvmf#$docdir#g" \
  systemd/nvmf-target.service >"$D$unitdir/nvmf-target.service"
chmod 0644 "$D$unitdir/nvmf-target.service"
install -D -m 0644 systemd/sysusers.d/nvmf.conf "$D$sysusersdir/nvmf.conf"
install -D -m 0755 "$host_bin" "$D$prefix/bin/nvmf-host"
sed -e "s#/usr/local/bin/nvmf-host#$prefix/bin/nvmf-host#g" -e "s#/usr/local/share/doc/nvmf#$docdir#g" \
  systemd/nvmf-host.service >"$D$unitdir/nvmf-host.service"
chmod 0644 "$D$unitdir/nvmf-host.service"
install -D -m 0644 systemd/sysusers.d/nvmf-host.conf "$D$sysusersdir/nvmf-host.conf"
install -D -m 0644 config/examples/host.toml "$D$docdir/host.toml.example"
install -D -m 0644 systemd/nvmf-host.service.d/ublk.conf "$D$docdir/nvmf-host-ublk.conf"
install -D -m 0644 README.md "$D$docdir/README.md"
install -D -m 0644 systemd/README.md "$D$docdir/systemd.md"
install -D -m 0644 systemd/nvmf-target.service.d/passthrough.conf "$D$docdir/passthrough.conf"
install -D -m 0644 config/examples/target.toml "$D$docdir/target.toml.example"
install -d -m 0755 "$D$prefix/share/nvmf/fio-jobs"
install -m 0644 fio-jobs/*.fio fio-jobs/README.md "$D$prefix/share/nvmf/fio-jobs/"

# The service user (and group) must exist before /etc/nvmf can belong to it.
live=0
if [[ -z $D && $(id -u) == 0 ]]; then
  live=1
  systemd-sysusers "$sysusersdir/nvmf.conf" "$sysusersdir/nvmf-host.conf"
fi

# 0755: each daemon's file is readable by its own group only (target.toml: nvmf, host.toml: nvmf-host).
install -d -m 0755 "$D/etc/nvmf"
host_config=$D/etc/nvmf/host.toml
if [[ -e $host_config ]]; then
  echo "install.sh: keeping the existing /etc/nvmf/host.toml"
else
  install -m 0640 config/examples/host.toml "$host_config"
  echo "install.sh: installed the example host configuration as /etc/nvmf/host.toml: edit it before starting"
fi
config=$D/etc/nvmf/target.toml
if [[ -e $config ]]; then
  echo "install.sh: keeping the existing /etc/nvmf/target.toml"
else
  install -m 0640 systemd/target.toml "$config"
  echo "install.sh: installed the default configuration as /etc/nvmf/target.toml (loopback, /var/lib/nvmf/default.img)"
fi
# The default configuration's namespace: a sparse file in the unit's state directory, never replaced.
install -d -m 0750 "$D/var/lib/nvmf"
image=$D/var/lib/nvmf/default.img
if [[ ! -e $image ]]; then
  truncate -s 1G "$image"
  chmod 0640 "$image"
  echo "install.sh: created /var/lib/nvmf/default.img (1 GiB, sparse)"
fi
if ((live)); then
  chown nvmf:nvmf /var/lib/nvmf /var/lib/nvmf/default.img
  chgrp nvmf /etc/nvmf/target.toml
  chgrp nvmf-host /etc/nvmf/host.toml
  if [[ -d /run/systemd/system ]]; then
    systemctl daemon-reload
  else
    echo "install.sh: systemd is not running here; run 'systemctl daemon-reload' where it is"
  fi
else
  echo "install.sh: staged under '${D:-/}' without creating the nvmf user: on the target machine run" \
    "'systemd-sysusers', 'chgrp nvmf /etc/nvmf/target.toml', 'chgrp nvmf-host /etc/nvmf/host.toml' and" \
    "'chown -R nvmf:nvmf /var/lib/nvmf'"
fi
echo "install.sh: done. Check the configuration with: $prefix/bin/nvmf-target --config /etc/nvmf/target.toml --check"
echo "install.sh: for namespaces on block devices: mkdir -p /etc/systemd/system/nvmf-target.service.d && $prefix/bin/nvmf-target systemd-devices" \
  "> /etc/systemd/system/nvmf-target.service.d/devices.conf (the devices the configuration names), systemctl daemon-reload"
echo "install.sh: then: systemctl enable --now nvmf-target"
echo "install.sh: for the host: edit /etc/nvmf/host.toml, then: systemctl enable --now nvmf-host"

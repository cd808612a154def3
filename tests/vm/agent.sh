# A lab node's job runner (tests/src/vm/lab.rs), sourced by stage2.sh in place of a scenario. The harness, and
# `on_node` in other nodes, leave a job as $ctl/jobs/ID.sh (written under another name, then renamed); the agent
# claims it (moves it to /run/nvmf-jobs), runs it with bash in the background (guest-lib.sh sourced, the scenario's
# environment and folder), its output in the guest's tmpfs, then copies ID.out and ID.err next to it and writes
# ID.status last. Jobs run concurrently; a daemon one starts outlives it (guest-lib's start_daemon). The loop waits
# on a fifo read (no exec), and ends when $ctl/poweroff appears or the harness's heartbeat stops.
jobs=$ctl/jobs
mkdir -p "$jobs" /run/nvmf-jobs
touch $ctl/ready

_run_job() {
  local id=$1 w=/run/nvmf-jobs/$1 rc
  bash -c '. "$NVMF_GUEST_LIB"; . "$1"' "job $id" "$w.sh" > "$w.out" 2> "$w.err" < /dev/null
  rc=$?
  cp "$w.out" "$jobs/$id.out"
  cp "$w.err" "$jobs/$id.err"
  echo "$rc" > "$jobs/$id.status.tmp" && mv "$jobs/$id.status.tmp" "$jobs/$id.status"
}

# The harness rewrites /run/nvmf-lab/heartbeat (its Unix time) every 2 s: two minutes without a beat, it has died
# without stopping the lab, and this node powers itself off rather than run on.
beats=0
while [ ! -e $ctl/poweroff ]; do
  beats=$((beats + 1))
  if ((beats % 25 == 0)) && read -r beat < /run/nvmf-lab/heartbeat && ((EPOCHSECONDS - beat > 120)); then
    echo "nvmf-vm agent: no heartbeat from the harness since $beat: powering off" >&2
    break
  fi
  for f in "$jobs"/*.sh; do
    [ -e "$f" ] || continue
    id=${f##*/}
    id=${id%.sh}
    mv "$f" "/run/nvmf-jobs/$id.sh" 2>/dev/null || continue
    _run_job "$id" &
  done
  read -t 0.2 <> /run/nvmf-nap
done
:

# A lab node's job runner (tests/src/vm/lab.rs), sourced by stage2.sh in place of a scenario. The harness, and
# `on_node` in other nodes, leave a job as $ctl/jobs/ID.sh (written under another name, then renamed); the agent
# claims it (moves it to /run/nvmf-jobs), runs it with bash in the background (guest-lib.sh sourced, the scenario's
# environment and folder), its output in the guest's tmpfs, then copies ID.out and ID.err next to it and writes
# ID.status last. Jobs run concurrently; a daemon one starts outlives it (guest-lib's start_daemon). The loop waits
# on a fifo read (no exec), and ends when $ctl/poweroff appears.
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

while [ ! -e $ctl/poweroff ]; do
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

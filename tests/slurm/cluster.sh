#!/usr/bin/env bash
# A single-node Slurm cluster for the tests, from Debian's slurm-wlm and munge (needs root).
#   tests/slurm/cluster.sh start   install if missing, write slurm.conf, start munged, slurmctld, slurmd
#   tests/slurm/cluster.sh stop    stop exactly the daemons `start` recorded
# slurm.conf goes to Slurm's default location (Snakemake's Slurm job-step plugin drops SLURM_CONF).
set -euo pipefail
STATE=/run/opd-test-slurm
CONF=/etc/slurm/slurm.conf
MARK="# written by opd-budget tests/slurm/cluster.sh"

start() {
  stop >/dev/null  # daemons a previous start left running
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
  fi
  if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    echo "refusing to overwrite $CONF: it was not written by this script" >&2; exit 1
  fi
  mkdir -p "$STATE" /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /etc/munge
  [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1k count=1 status=none; }
  chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
  chmod 0400 /etc/munge/munge.key
  local mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 2048 ))
  cat > "$CONF" <<CONF
$MARK
ClusterName=opdtest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job may start again after cred_expire seconds (default 120): the time-limit test requeues twice
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
MinJobAge=600
JobRequeue=1
KillWait=5
SchedulerParameters=sched_interval=2
MessageTimeout=20
NodeName=$(hostname -s) NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$(hostname -s) Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
  if ! pgrep -x munged >/dev/null; then
    runuser -u munge -- /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force
    pgrep -n -x munged > "$STATE/munged.pid"
  fi
  /usr/sbin/slurmctld -c -i
  /usr/sbin/slurmd
  for _ in $(seq 60); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then echo "slurm up"; return 0; fi
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  echo "slurm did not come up; see /var/log/slurm" >&2; tail -n 5 /var/log/slurm/*.log >&2; exit 1
}

stop() {
  for d in slurmd slurmctld munged; do
    [ -f "$STATE/$d.pid" ] || continue
    pid=$(cat "$STATE/$d.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$STATE/$d.pid"
  done
  echo "slurm stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac

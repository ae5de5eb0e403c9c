#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for the cluster tests (tests/test_slurm.py):
# Debian's slurmctld, slurmd, slurmdbd with MariaDB and munge, started directly (no systemd).
# The node declares one GPU in GRES (no device file: nothing binds to it) so that jobs asking for a
# GPU are accepted; the tests give the node stand-in GPU tools. Run as root:
#   apt-get install -y slurm-wlm slurmdbd munge mariadb-server
#   bash scripts/slurm_local.sh          # idempotent; prints sinfo when the cluster answers
set -euo pipefail

NODE=$(hostname -s)
getent hosts "$NODE" >/dev/null || echo "127.0.0.1 $NODE" >>/etc/hosts  # slurmd looks its name up
CPUS=$(nproc)
MEM_MB=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024))
CONF=/etc/slurm
mkdir -p "$CONF" /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm /run/munge /run/mysqld

# munge: one key, the daemon as its own user.
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged

# MariaDB for slurmdbd's accounting (what sacct reads).
chown mysql:mysql /run/mysqld
if ! mysqladmin ping --silent 2>/dev/null; then
  (mysqld_safe --user=mysql >/var/log/slurm/mysqld.out 2>&1 &)
  for _ in $(seq 60); do mysqladmin ping --silent 2>/dev/null && break; sleep 1; done
fi
mysql -u root <<'SQL'
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL

cat >"$CONF/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
PidFile=/run/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
EOF
# Owned by SlurmUser, whoever owned a copy already there (slurmdbd refuses a file of another owner).
chown root:root "$CONF/slurmdbd.conf" && chmod 600 "$CONF/slurmdbd.conf"

cat >"$CONF/slurm.conf" <<EOF
ClusterName=nsightflow
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$NODE CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
touch /var/lib/slurm/stand-in-gpu0
echo "NodeName=$NODE Name=gpu File=/var/lib/slurm/stand-in-gpu0" >"$CONF/gres.conf"

pgrep -x slurmdbd >/dev/null || /usr/sbin/slurmdbd
for _ in $(seq 60); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
sacctmgr -i add cluster nsightflow >/dev/null 2>&1 || true
sacctmgr -i add account nsightflow Description=tests Organization=nsightflow >/dev/null 2>&1 || true
sacctmgr -i add user "$(id -un)" Account=nsightflow DefaultAccount=nsightflow >/dev/null 2>&1 || true
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -qxE '(idle|mixed|allocated)' && break
  sleep 1
done
scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
sinfo
sacctmgr -n list association format=cluster,account,user

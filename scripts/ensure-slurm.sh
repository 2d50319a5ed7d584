#!/usr/bin/env bash
# Make sure Debian's Slurm (slurmctld, slurmd, the client, slurmdbd), munge and MariaDB are
# installed: the Slurm tests start a real single-node cluster from them (tests/slurm_fixture.py).
set -euo pipefail
PKGS="slurmctld slurmd slurm-client slurmdbd munge mariadb-server"
need=0
for b in munged mariadbd mariadb-install-db slurmdbd slurmctld slurmd sacct; do
  PATH="/usr/sbin:/usr/bin:/sbin:/bin:$PATH" command -v "$b" >/dev/null || need=1
done
if [ "$need" = "0" ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "installing Debian's Slurm, munge and MariaDB for the Slurm tests..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # policy-rc.d keeps the packages' own services from starting: the tests start their own.
  apt-get install -y -qq $PKGS >/dev/null
  exit 0
fi
echo "error: the Slurm tests need $PKGS; install them with" >&2
echo "       sudo apt-get install -y $PKGS" >&2
exit 1

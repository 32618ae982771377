#!/usr/bin/env bash
# Debian packages Trainyard needs to build and test: the MySQL client headers that the
# mysqlclient driver compiles against, and pkg-config to find them; Prometheus, which the
# repair manager's tests start.
# Installs only what is missing; needs root (or sudo) the first time. Extra package names
# given as arguments are installed too (`make bench` asks for wrk).
set -euo pipefail

# prometheus: the repair manager's and the monitoring tests scrape node agents and the portal
# with the real server; its promtool checks deploy/prometheus's alert rules.
# nftables: the allowlist tests drive the real `nft` in a network namespace of their own.
# openssh-client, openssh-server, tmux: the SSH gateway's tests drive OpenSSH's ssh, scp
# and sftp (a terminal session inside tmux), sessions run OpenSSH's sftp-server, and
# bench/ssh compares the gateway with OpenSSH's sshd.
# nginx: the web tier's front (backend/core/front.py), which make run starts before gunicorn.
# slurm-wlm, munge, slurmrestd: the Slurm backend's tests run a real multi-node cluster
# (deploy/slurm-cluster.sh).
# runc, tini, iproute2: the local backend's sandbox (TRAINYARD_LOCAL_SANDBOX=runc) runs each
# worker in a runc container whose pid 1 is tini, each job in a network namespace on a
# bridge made with ip and bridge; its tests drive the real runtime.
# umoci, skopeo, busybox-static: a job's image on the local backend (jobmanager/backends/
# images.py) is unpacked from the site's OCI image layouts with umoci and pulled into them
# with skopeo (tini's tini-static is the init put into it); the tests build a small image
# with umoci from busybox-static's binary, with no registry.
# python3-venv: the training environment every job account uses (make training-env) is a
# virtualenv of the system's Python. curl, jq: the README's and user guide's examples.
packages=(default-libmysqlclient-dev pkg-config prometheus nftables openssh-client
          openssh-server tmux nginx slurm-wlm munge slurmrestd runc tini iproute2
          umoci skopeo busybox-static python3-venv curl jq "$@")
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null; then
  echo "Install the MySQL client headers and pkg-config (${missing[*]}) with your package manager." >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "Installing ${missing[*]} ..."
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# Copyright The peerdiscovery Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# Helpers for scripts that run the built binaries (smoke tests). Source after
# common.sh. Everything listens on 127.0.0.1 only.

if [[ -n "${PEERDISCOVERY_TESTING_SOURCED:-}" ]]; then
  return 0
fi
PEERDISCOVERY_TESTING_SOURCED=1

# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Ports handed out by free_port in this shell, so two calls never collide.
_USED_PORTS=" "

# free_port prints a TCP port on 127.0.0.1 that nothing listens on. There is
# an unavoidable window between this check and the server binding the port.
free_port() {
  local port i
  for ((i = 0; i < 200; i++)); do
    port=$((20000 + RANDOM % 40000))
    [[ "${_USED_PORTS}" == *" ${port} "* ]] && continue
    # A refused connection means the port is free.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; then
      _USED_PORTS+="${port} "
      echo "${port}"
      return 0
    fi
  done
  die "no free port found"
}

# wait_until TIMEOUT_SECONDS DESCRIPTION CMD... retries CMD every second
# until it succeeds. CMD exiting with 125 gives up at once (e.g. the process
# being waited for died).
wait_until() {
  local timeout="${1}" what="${2}" deadline rc
  shift 2
  deadline=$(($(date +%s) + timeout))
  while true; do
    rc=0
    "$@" >/dev/null 2>&1 || rc=$?
    ((rc == 0)) && return 0
    if ((rc == 125)); then
      log::error "gave up waiting for ${what}"
      return 1
    fi
    if (($(date +%s) >= deadline)); then
      log::error "timed out after ${timeout}s waiting for ${what}"
      return 1
    fi
    sleep 1
  done
}

# pid_alive PID succeeds while the process runs.
pid_alive() { kill -0 "${1}" 2>/dev/null; }

# stop_pid PID [NAME] sends SIGTERM, waits up to 15s, then SIGKILL.
stop_pid() {
  local pid="${1}" name="${2:-process}" i
  pid_alive "${pid}" || return 0
  kill -TERM "${pid}" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    pid_alive "${pid}" || {
      wait "${pid}" 2>/dev/null || true
      return 0
    }
    sleep 0.1
  done
  log::warn "${name} (pid ${pid}) did not stop on SIGTERM, killing it"
  kill -KILL "${pid}" 2>/dev/null || true
  wait "${pid}" 2>/dev/null || true
}

# start_etcd DATA_DIR CLIENT_PORT PEER_PORT LOG_FILE starts the built etcd in
# the background on 127.0.0.1 and sets ETCD_PID. Wait with etcd_healthy.
start_etcd() {
  local data_dir="${1}" client_port="${2}" peer_port="${3}" log_file="${4}"
  local client="http://127.0.0.1:${client_port}" peer="http://127.0.0.1:${peer_port}"
  mkdir -p "${data_dir}"
  "$(etcd_bin)" \
    --name=default \
    --data-dir="${data_dir}" \
    --listen-client-urls="${client}" \
    --advertise-client-urls="${client}" \
    --listen-peer-urls="${peer}" \
    --initial-advertise-peer-urls="${peer}" \
    --initial-cluster="default=${peer}" \
    --log-level=warn \
    >"${log_file}" 2>&1 &
  ETCD_PID=$!
  export ETCD_PID
}

# etcd_healthy CLIENT_PORT succeeds once etcd reports healthy.
etcd_healthy() {
  curl -fsS --max-time 2 "http://127.0.0.1:${1}/health" | grep -q '"health":"true"'
}

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

# The machines of the kubeadm plane (hack/kubeadm-plane.sh): what an admin
# has before running kubeadm, one "machine" per node on this host.
#
# A node is a network namespace of its own (kubeadm's stacked etcd,
# kube-controller-manager, kube-scheduler and the kubelet bind 127.0.0.1,
# so nodes cannot share one) and a mount namespace in which kubeadm's
# paths are the node's own: /etc/kubernetes, /var/lib/kubelet,
# /var/lib/etcd, /etc/containerd, /etc/cni/net.d, containerd's root and
# state. It runs containerd and a kubelet supervisor that does what
# systemd and kubeadm's 10-kubeadm.conf drop-in do: start the kubelet with
# kubeadm's flags once /var/lib/kubelet/config.yaml exists, and start it
# again when it exits. systemctl is hidden in the node (bind-mounted over
# with /dev/null), so kubeadm takes its supported path for a machine
# without an init system ("won't make sure the kubelet is running") and
# "restart the kubelet" is a SIGTERM to it (kp::node_restart_kubelet).
#
# The nodes' network: a switch namespace with a bridge; each node's eth0
# on it at 10.254.<octet>.10+i; the host at 10.254.<octet>.1, where
# haproxy balances the control-plane endpoint over the nodes' :6443 (as
# kubeadm's HA guide does). Pods: 10.244.<i>.0/24 on a CNI bridge in node
# i, routed between nodes through their eth0.

KUBEADM_OCTET="${KUBEADM_OCTET:-88}"
KUBEADM_NODES="${KUBEADM_NODES:-3}"

kp::subnet_ip() { echo "10.254.${KUBEADM_OCTET}.${1:?suffix}"; }
kp::node_ip() { kp::subnet_ip $((10 + ${1:?index})); }
kp::host_ip() { kp::subnet_ip 1; }
kp::node_dir() { echo "${KP_RUN:?}/nodes/node-${1:?index}"; }
kp::node_netns() { echo "pd-${KP_ID:?}-n${1:?index}"; }
kp::cgroup() { echo "peerdiscovery/${KP_ID:?}/node-${1:?index}"; }

kp::cgroup_hierarchies() {
  awk '{for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup" || $(i+1) == "cgroup2") print $5; break }}' /proc/self/mountinfo | sort -u
}

# kp::ensure_cgroup REL creates REL in every hierarchy, cpuset's
# cpus/mems copied from the parent (a new cpuset is empty otherwise).
kp::ensure_cgroup() {
  local h dir parent p f
  while read -r h; do
    dir="${h}"
    for p in ${1//\// }; do
      parent="${dir}"
      dir="${dir}/${p}"
      mkdir -p "${dir}"
      for f in cpuset.cpus cpuset.mems; do
        if [[ -f "${dir}/${f}" && -z "$(tr -d '[:space:]' <"${dir}/${f}")" ]]; then
          cat "${parent}/${f}" >"${dir}/${f}"
        fi
      done
    done
  done < <(kp::cgroup_hierarchies)
}

# kp::join_cgroup_script REL prints shell that moves the shell into REL.
kp::join_cgroup_script() {
  local h
  while read -r h; do printf 'echo $$ > %q && ' "${h}/${1}/cgroup.procs"; done < <(kp::cgroup_hierarchies)
}

kp::network_up() {
  local sw="pd-${KP_ID}" i ns
  ip netns add "${sw}"
  ip -n "${sw}" link set lo up
  ip -n "${sw}" link add br0 type bridge
  ip -n "${sw}" link set br0 up
  ip link add "pdh${KP_ID}" type veth peer name "pdn${KP_ID}" netns "${sw}"
  ip addr add "$(kp::host_ip)/24" dev "pdh${KP_ID}"
  ip link set "pdh${KP_ID}" up
  ip -n "${sw}" link set "pdn${KP_ID}" master br0 up
  for ((i = 0; i < KUBEADM_NODES; i++)); do
    ns="$(kp::node_netns "${i}")"
    ip netns add "${ns}"
    ip -n "${ns}" link set lo up
    ip link add "pdv${KP_ID}${i}" netns "${sw}" type veth peer name eth0 netns "${ns}"
    ip -n "${sw}" link set "pdv${KP_ID}${i}" master br0 up
    ip -n "${ns}" addr add "$(kp::node_ip "${i}")/24" dev eth0
    ip -n "${ns}" link set eth0 up
    # kubeadm's preflight wants forwarding on, and Pods of other nodes
    # are reached through them.
    ip netns exec "${ns}" sysctl -q -w net.ipv4.ip_forward=1
    # No default route: nothing leaves the plane. Service IPs need a route
    # for kube-proxy's DNAT to apply; on-link, so that one without
    # endpoints goes nowhere.
    ip -n "${ns}" route add 10.96.0.0/12 dev eth0
  done
  # Each node reaches the others' Pods through their eth0.
  local j
  for ((i = 0; i < KUBEADM_NODES; i++)); do
    for ((j = 0; j < KUBEADM_NODES; j++)); do
      ((i == j)) || ip -n "$(kp::node_netns "${i}")" route add "10.244.${j}.0/24" via "$(kp::node_ip "${j}")"
    done
  done
}

kp::network_down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^pd-${KP_ID}(-n[0-9]+)?$"); do
    ip netns delete "${ns}" || true
  done
  ip link delete "pdh${KP_ID}" 2>/dev/null || true
}

# Host folders the nodes mount over (mount points must exist).
KP_MOUNT_POINTS=(/etc/kubernetes /var/lib/kubelet /var/lib/etcd /etc/containerd /etc/cni/net.d
  /var/lib/containerd /run/containerd /var/lib/cni /var/log/pods /var/log/containers /opt/cni/bin)

kp::node_holder_script() {
  local i="$1" d
  d="$(kp::node_dir "${i}")"
  kp::join_cgroup_script "$(kp::cgroup "${i}")/system"
  printf 'hostname node-%d && ' "${i}"
  printf 'mount --bind %q /etc/kubernetes && ' "${d}/etc/kubernetes"
  printf 'mount --bind %q /var/lib/etcd && ' "${d}/var/lib/etcd"
  printf 'mount --bind %q /etc/containerd && ' "${d}/etc/containerd"
  printf 'mount --bind %q /etc/cni/net.d && ' "${d}/etc/cni/net.d"
  printf 'mount --bind %q /var/lib/containerd && ' "${d}/var/lib/containerd"
  printf 'mount --bind %q /var/log/pods && ' "${d}/var/log/pods"
  # The CNI plugins where kubeadm and containerd look by default.
  printf 'mount --bind /usr/lib/cni /opt/cni/bin && '
  local t
  for t in /var/lib/kubelet /run/containerd /var/lib/cni /var/log/containers; do
    printf 'mount -t tmpfs -o mode=0755 tmpfs %q && ' "${t}"
  done
  # No init system on this machine, as far as kubeadm can tell.
  printf 'mount --bind /dev/null /usr/bin/systemctl && '
  printf 'exec sleep infinity'
}

kp::holder_pid() { cat "$(kp::node_dir "${1}")/holder.pid"; }

# kp::admin WHERE CMD... runs CMD as the admin types it (WHERE: a node's
# index, on that node; "admin": here, with the plane's kubeconfig) and
# records it in commands.log: test/kubeadm checks that docs/operations.md
# has every command run.
kp::admin() {
  local where="$1"
  shift
  if [[ "${where}" == admin ]]; then
    echo "admin: $(kp::quote "$@")" >>"${KP_RUN}/commands.log"
    "$@"
  else
    echo "node-${where}: $(kp::quote "$@")" >>"${KP_RUN}/commands.log"
    kp::on_node "${where}" "$@"
  fi
}

# kp::admin_sh WHERE LINE: kp::admin for a shell command line (a pipe, a
# loop), bounded by 2 minutes.
kp::admin_sh() {
  echo "$([[ "$1" == admin ]] && echo admin || echo "node-$1"): $2" >>"${KP_RUN}/commands.log"
  if [[ "$1" == admin ]]; then
    timeout 120 bash -c "$2"
  else
    kp::on_node "$1" timeout 120 bash -c "$2"
  fi
}

# kp::quote ARG... prints the arguments as one types them: single quotes
# only around those with characters the shell would take.
kp::quote() {
  local a out=()
  for a in "$@"; do
    if [[ "${a}" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then out+=("${a}"); else out+=("'${a//\'/\'\\\'\'}'"); fi
  done
  echo "${out[*]}"
}

# kp::on_node I CMD... runs CMD on node I (its namespaces and cgroup), with
# the node's binaries (kubeadm, kubelet) first on PATH.
kp::on_node() {
  local i="$1" pid
  shift
  pid="$(kp::holder_pid "${i}")"
  nsenter -t "${pid}" -m -u -n -- env PATH="$(kp::node_dir "${i}")/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    sh -c "$(kp::join_cgroup_script "$(kp::cgroup "${i}")/system")"'exec "$@"' sh "$@"
}

kp::write_containerd_config() {
  local i="$1" d
  d="$(kp::node_dir "${i}")"
  cat >"${d}/etc/containerd/config.toml" <<EOT
# Written by hack/lib/kubeadm-plane.sh for node-${i}: containerd's default
# paths (the node's own mounts), the CRI plugin with the pause image
# kubeadm expects, runc with cgroupfs (the kubelet's driver), and nothing
# that reaches outside the node.
version = 2
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp",
]
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10.2"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # Lowering an OOM score needs CAP_SYS_RESOURCE, which root lacks here.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
EOT
  cat >"${d}/etc/cni/net.d/10-bridge.conflist" <<EOT
{
  "cniVersion": "1.0.0",
  "name": "node-${i}",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.244.${i}.0/24"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOT
}

# The kubelet as kubeadm's systemd drop-in (10-kubeadm.conf) runs it, and
# as systemd's Restart=always with RestartSec=1 restarts it.
kp::kubelet_supervisor_script() {
  printf 'pidfile=%q\n' "$(kp::node_dir "$1")/kubelet.pid"
  cat <<'EOT'
while :; do
  if [ -f /var/lib/kubelet/config.yaml ]; then
    KUBELET_KUBEADM_ARGS=""
    # /etc/default/kubelet's variable; --v=2 logs each container kill
    # with its grace period.
    KUBELET_EXTRA_ARGS="--v=2"
    [ -f /var/lib/kubelet/kubeadm-flags.env ] && . /var/lib/kubelet/kubeadm-flags.env
    kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
      --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml \
      $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS &
    echo $! >"$pidfile"
    wait $!
  fi
  sleep 1
done
EOT
}

kp::node_up() {
  local i="$1" d m
  d="$(kp::node_dir "${i}")"
  mkdir -p "${d}"/{etc/kubernetes,var/lib/etcd,etc/containerd,etc/cni/net.d,var/lib/containerd,var/log/pods,bin,log}
  for m in "${KP_MOUNT_POINTS[@]}"; do mkdir -p "${m}"; done
  kp::ensure_cgroup "$(kp::cgroup "${i}")/system"
  kp::write_containerd_config "${i}"
  nsenter --net="/run/netns/$(kp::node_netns "${i}")" -- unshare --uts --mount --propagation private -- \
    sh -c "$(kp::node_holder_script "${i}")" >"${d}/log/holder.log" 2>&1 &
  echo $! >"${d}/holder.pid"
  local n=0
  until [[ "$(cat "/proc/$(kp::holder_pid "${i}")/comm" 2>/dev/null)" == sleep ]]; do
    ((n++ < 100)) || { cat "${d}/log/holder.log" >&2; return 1; }
    sleep 0.1
  done
  kp::on_node "${i}" containerd >"${d}/log/containerd.log" 2>&1 &
  n=0
  until kp::on_node "${i}" ctr version >/dev/null 2>&1; do
    ((n++ < 100)) || { tail -20 "${d}/log/containerd.log" >&2; return 1; }
    sleep 0.2
  done
  kp::on_node "${i}" sh -c "$(kp::kubelet_supervisor_script "${i}")" >>"${d}/log/kubelet.log" 2>&1 &
  echo $! >"${d}/kubelet-supervisor.pid"
}

# kp::node_restart_kubelet I: what "systemctl restart kubelet" does (the
# supervisor starts it again at once).
kp::node_restart_kubelet() {
  local f
  f="$(kp::node_dir "$1")/kubelet.pid"
  [[ -f "${f}" ]] && kill "$(cat "${f}")"
}

kp::import_images() {
  local i="$1" a
  for a in "${OUTPUT_DIR}"/images/kubeadm/*.tar; do
    kp::on_node "${i}" ctr -n k8s.io images import --no-unpack=false "${a}" >/dev/null
  done
}

# kp::install_binary I NAME [VERSION]: the node's package of kubeadm or the
# kubelet at VERSION, or of crictl (replaced as a package manager does: a running
# kubelet keeps its old file until it restarts).
kp::install_binary() {
  local d
  d="$(kp::node_dir "$1")"
  install -m 0755 "$("${2}_bin" "${3:-}")" "${d}/bin/${2}.new"
  mv -f "${d}/bin/${2}.new" "${d}/bin/${2}"
}

# kp::haproxy_config [CA]: the control-plane endpoint, TCP passthrough to
# every node's kube-apiserver (TLS ends at kube-apiserver). Before kubeadm
# init there is no CA: a server is in rotation when it accepts
# connections; with the cluster CA, when its /readyz answers 200 over TLS
# verified with it, so that a stopping kube-apiserver (readyz failing
# through its --shutdown-delay-duration) leaves the rotation before it
# stops serving. Redispatch: a connection refused goes to another server.
kp::haproxy_config() {
  local i ca="${1:-}"
  cat <<EOT
# Written by hack/lib/kubeadm-plane.sh.
global
  maxconn 4000
  # The runtime API: the runbook drains a node here before its upgrade,
  # and test/kubeadm's workload follows each server's state from it.
  stats socket ${KP_RUN}/haproxy.sock mode 600 level admin
defaults
  mode tcp
  retries 3
  option redispatch
  timeout connect 2s
  timeout client 1h
  timeout server 1h
frontend apiserver
  bind $(kp::host_ip):6443
  default_backend apiservers
backend apiservers
  balance roundrobin
EOT
  if [[ -n "${ca}" ]]; then
    echo "  option httpchk GET /readyz"
    echo "  http-check expect status 200"
    echo "  default-server inter 500ms fall 2 rise 1 check-ssl verify required ca-file ${ca}"
  else
    echo "  default-server inter 500ms fall 2 rise 1"
  fi
  for ((i = 0; i < KUBEADM_NODES; i++)); do
    echo "  server node-${i} $(kp::node_ip "${i}"):6443 check"
  done
}

# kp::lb_set I STATE: haproxy's admin state of node I (drain: no new
# connections, ready: back in rotation once its /readyz check passes), as
# docs/operations.md says to set it (the runbook's socket is Debian's
# /run/haproxy/admin.sock; the run's is its own).
kp::lb_set() {
  kp::admin_sh admin "echo \"set server apiservers/node-$1 state $2\" | socat stdio ${KP_RUN}/haproxy.sock" >/dev/null
}

# kp::lb_up I: haproxy has node I up and in rotation.
kp::lb_up() {
  echo "show stat" | socat stdio "${KP_RUN}/haproxy.sock" | awk -F, -v s="node-$1" '$1 == "apiservers" && $2 == s { print $18 }' | grep -qx UP
}

# kp::haproxy_up [CA] starts haproxy, or replaces a running one (its
# connections finish on the old process: -sf).
kp::haproxy_up() {
  local old=()
  [[ -f "${KP_RUN}/haproxy.pid" ]] && old=(-sf "$(cat "${KP_RUN}/haproxy.pid")")
  kp::haproxy_config "${1:-}" >"${KP_RUN}/haproxy.cfg"
  haproxy -f "${KP_RUN}/haproxy.cfg" -db "${old[@]}" >>"${KP_RUN}/haproxy.log" 2>&1 &
  echo $! >"${KP_RUN}/haproxy.pid"
}

# kp::keep_pod_logs keeps every Pod's logs in <node>/log/pods: the
# kubelet deletes a Pod's log folder with the Pod (an evicted replica, a
# static Pod replaced by its upgrade), and a hard link keeps the file. A
# rotated log keeps its own link under its new name (0.log.<time>).
kp::keep_pod_logs() {
  local i src kept f
  while sleep 2; do
    for ((i = 0; i < KUBEADM_NODES; i++)); do
      src="$(kp::node_dir "${i}")/var/log/pods"
      kept="$(kp::node_dir "${i}")/log/pods"
      [[ -d "${src}" ]] || continue
      while read -r f; do
        [[ "${kept}/${f}" -ef "${src}/${f}" ]] && continue
        mkdir -p "$(dirname "${kept}/${f}")"
        ln -f "${src}/${f}" "${kept}/${f}" 2>/dev/null || true
      done < <(cd "${src}" && find . -type f -name '*.log*' -printf '%P\n')
    done
  done
}

# kp::down stops every process of the run and removes its namespaces.
kp::down() {
  local i d h pid
  # The cluster's Events (the extension's PeerReady/PeerNotReady among
  # them), while it still answers.
  "$(kubectl_bin)" --kubeconfig "${KP_RUN}/kubeconfig" --request-timeout=10s get events -A --sort-by=.lastTimestamp \
    -o wide >"${KP_RUN}/events.txt" 2>&1 || true
  [[ -f "${KP_RUN}/pod-logs.pid" ]] && kill "$(cat "${KP_RUN}/pod-logs.pid")" 2>/dev/null || true
  [[ -f "${KP_RUN}/haproxy.pid" ]] && kill "$(cat "${KP_RUN}/haproxy.pid")" 2>/dev/null || true
  for ((i = 0; i < KUBEADM_NODES; i++)); do
    d="$(kp::node_dir "${i}")"
    # Everything of the node runs in its cgroup (containers included:
    # the kubelet's cgroupRoot is under it): freeze, kill, thaw.
    while read -r h; do
      local cg="${h}/$(kp::cgroup "${i}")"
      [[ -d "${cg}" ]] || continue
      [[ -f "${cg}/freezer.state" ]] && echo FROZEN >"${cg}/freezer.state"
      for pid in $(find "${cg}" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -9 "${pid}" 2>/dev/null || true; done
      [[ -f "${cg}/freezer.state" ]] && echo THAWED >"${cg}/freezer.state"
    done < <(kp::cgroup_hierarchies)
    [[ -f "${d}/holder.pid" ]] && kill -9 "$(cat "${d}/holder.pid")" 2>/dev/null || true
  done
  sleep 1
  # What is big goes (containerd's images and snapshots, etcd's data, the
  # binaries: about 2 GB per node); configuration, logs and
  # commands.log stay for inspection.
  for ((i = 0; i < KUBEADM_NODES; i++)); do
    d="$(kp::node_dir "${i}")"
    rm -rf "${d}/var/lib/containerd" "${d}/var/lib/etcd" "${d}/bin"
  done
  # Empty cgroups, deepest first.
  while read -r h; do
    [[ -d "${h}/peerdiscovery/${KP_ID}" ]] && find "${h}/peerdiscovery/${KP_ID}" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done < <(kp::cgroup_hierarchies)
  kp::network_down
}

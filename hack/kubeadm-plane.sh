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

# hack/kubeadm-plane.sh: a three-node HA control plane made by kubeadm,
# every kube-apiserver the filter build, on "machines" of this host (see
# hack/lib/kubeadm-plane.sh for what a machine is).
#
#   up [--version V] [--routing upstream]
#                      kubeadm init on node-0, kubeadm join --control-plane
#                      on node-1 and node-2 (V: v1.36.3 by default); prints
#                      the kubeconfig and leaves the plane running. With
#                      --routing upstream: kubeadm's own kube-apiserver
#                      image (plain upstream, its built-in peer proxy on)
#                      and no peerdiscovery-apiserver, for comparison
#   upgrade-node I V   upgrades node I to V as docs/operations.md says:
#                      the kubeadm package, the image patch, kubeadm upgrade
#                      apply (node-0) or node (the others), the kubelet
#                      package and its restart
#   exec I CMD...      runs CMD on node I
#   down               stops the plane and removes it
#
# The run's state is in _output/kubeadm/current (a link to the run's
# folder): its kubeconfig (admin, through the control-plane endpoint),
# each node's files and logs.
set -Eeuo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
source "${REPO_ROOT}/hack/lib/kubeadm-plane.sh"
# The admin's commands (commands.log) as typed: from the repository, with
# kubectl on PATH.
cd "${REPO_ROOT}"
export PATH="$(dirname "$(kubectl_bin)"):${PATH}"

KP_BASE="${OUTPUT_DIR}/kubeadm"

kp::load_run() {
  KP_RUN="$(readlink -f "${KP_BASE}/current" 2>/dev/null || true)"
  [[ -n "${KP_RUN}" && -f "${KP_RUN}/id" ]] || die "no kubeadm plane is running (hack/kubeadm-plane.sh up)"
  KP_ID="$(cat "${KP_RUN}/id")"
  KP_ROUTING="$(cat "${KP_RUN}/routing")"
  export KUBECONFIG="${KP_RUN}/kubeconfig"
}

# The node's kubeadm configuration, in the node's /etc/kubernetes/kubeadm.
kp::write_kubeadm_config() {
  local i="$1" version="$2" d
  d="$(kp::node_dir "${i}")"
  mkdir -p "${d}/etc/kubernetes/kubeadm" "${d}/etc/kubernetes/patches"
  # docs/operations.md, section 3: the filter build's image, per node.
  if [[ "${KP_ROUTING}" == peerdiscovery ]]; then
    cat >"${d}/etc/kubernetes/patches/kube-apiserver0+json.yaml" <<EOT
- op: replace
  path: /spec/containers/0/image
  value: registry.example.com/kube-apiserver-peerdiscovery:${version}
EOT
  fi
  # docs/operations.md, section 3: etcd's static Pod keeps one UID, so the
  # new kubelet of an upgrade adopts the running etcd instead of killing it
  # as an orphan (a minor's kubelet hashes the manifest to another UID).
  cat >"${d}/etc/kubernetes/patches/etcd0+json.yaml" <<EOT
- op: add
  path: /metadata/uid
  value: $(cat /proc/sys/kernel/random/uuid)
EOT
  # This machine's share of the host: the node's cgroup (a real machine
  # has the root to itself).
  cat >"${d}/etc/kubernetes/patches/kubeletconfiguration0+merge.yaml" <<EOT
cgroupRoot: /$(kp::cgroup "${i}")
EOT
  local node_reg
  node_reg="$(
    cat <<EOT
nodeRegistration:
  name: node-${i}
  criSocket: unix:///run/containerd/containerd.sock
  imagePullPolicy: Never
  # Control-plane nodes run the extension's Pods too.
  taints: []
  kubeletExtraArgs:
  - name: node-ip
    value: $(kp::node_ip "${i}")
  ignorePreflightErrors:
  # The host's: swap on, and no br_netfilter sysctl in a network namespace.
  - Swap
  - FileContent--proc-sys-net-bridge-bridge-nf-call-iptables
  - SystemVerification
patches:
  directory: /etc/kubernetes/patches
EOT
  )"
  if ((i == 0)); then
    cat >"${d}/etc/kubernetes/kubeadm/init.yaml" <<EOT
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: ${KP_TOKEN}
  ttl: 24h0m0s
certificateKey: ${KP_CERT_KEY}
localAPIEndpoint:
  advertiseAddress: $(kp::node_ip "${i}")
  bindPort: 6443
${node_reg}
skipPhases:
# No kube-proxy or CoreDNS images here: kube-proxy runs on each node from
# its binary, and nothing in this plane resolves cluster names.
- addon/kube-proxy
- addon/coredns
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: ${version}
controlPlaneEndpoint: $(kp::host_ip):6443
etcd:
  local:
    # etcd built here (hack/build-etcd.sh); pinned so upgrades keep it.
    imageTag: ${ETCD_VERSION#v}-0
apiServer:
  extraArgs:
  # kubernetes/kubeadm#3301: the CA that signed every kube-apiserver's
  # serving certificate (kubeadm's cluster CA).
  - name: peer-ca-file
    value: /etc/kubernetes/pki/ca.crt
  # kubeadm sets no UID header: without it a peer drops the user's UID.
  - name: requestheader-uid-headers
    value: X-Remote-Uid
  # Behind a load balancer: keep serving for 5 s after SIGTERM while
  # /readyz fails, so that its health check takes the server out of the
  # rotation before it stops taking requests (kubeadm sets no delay).
  - name: shutdown-delay-duration
    value: 5s
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# Static Pod manifests read every 2 s (default 20 s): each kubeadm upgrade
# step waits for the kubelet to restart the component it rewrote.
fileCheckFrequency: 2s
# Nothing could be pulled again: never collect images.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
evictionPressureTransitionPeriod: 10s
EOT
  else
    cat >"${d}/etc/kubernetes/kubeadm/join.yaml" <<EOT
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: $(kp::host_ip):6443
    token: ${KP_TOKEN}
    caCertHashes:
    - ${KP_CA_HASH}
controlPlane:
  certificateKey: ${KP_CERT_KEY}
  localAPIEndpoint:
    advertiseAddress: $(kp::node_ip "${i}")
    bindPort: 6443
${node_reg}
EOT
  fi
}

# The node's UpgradeConfiguration: the image patch, and no kube-proxy or
# CoreDNS addon to upgrade (init skipped them; kubeadm's CoreDNS checks
# fail on a cluster without CoreDNS).
kp::write_upgrade_config() {
  local i="$1" version="$2"
  cat >"$(kp::node_dir "${i}")/etc/kubernetes/kubeadm/upgrade.yaml" <<EOT
apiVersion: kubeadm.k8s.io/v1beta4
kind: UpgradeConfiguration
plan:
  kubernetesVersion: ${version}
  ignorePreflightErrors:
  - CoreDNSUnsupportedPlugins
  - CoreDNSMigration
  # cgroup v1 on this host (the kubelet has failCgroupV1: false).
  - SystemVerification
apply:
  kubernetesVersion: ${version}
  # etcd is pinned (etcd.local.imageTag) and keeps its own UID (its
  # patch): nothing to upgrade, and kubeadm would wait for a restart that
  # does not come.
  etcdUpgrade: false
  patches:
    directory: /etc/kubernetes/patches
  skipPhases:
  - addon/kube-proxy
  - addon/coredns
  ignorePreflightErrors:
  - CoreDNSUnsupportedPlugins
  - CoreDNSMigration
  # cgroup v1 on this host (the kubelet has failCgroupV1: false).
  - SystemVerification
node:
  etcdUpgrade: false
  patches:
    directory: /etc/kubernetes/patches
  skipPhases:
  - addon/kube-proxy
  - addon/coredns
  ignorePreflightErrors:
  - SystemVerification
EOT
}

# kube-proxy on node I, from its binary (an image would need iptables), with
# the node's admin kubeconfig.
kp::kube_proxy_up() {
  local i="$1" version="$2" d
  d="$(kp::node_dir "${i}")"
  cat >"${d}/etc/kubernetes/kube-proxy.yaml" <<EOT
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/admin.conf
hostnameOverride: node-${i}
mode: iptables
clusterCIDR: 10.244.0.0/16
# Host-wide sysctls: leave them as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOT
  kp::on_node "${i}" "$(kube_proxy_bin "${version}")" --config=/etc/kubernetes/kube-proxy.yaml >"${d}/log/kube-proxy.log" 2>&1 &
}

kp::wait() {
  local what="$1" tries="$2"
  shift 2
  local n=0
  until "$@" >/dev/null 2>&1; do
    ((n++ < tries)) || die "timed out waiting for ${what}"
    sleep 1
  done
}

cmd_up() {
  local version="${KUBE_NODE_VERSION}"
  KP_ROUTING=peerdiscovery
  while (($#)); do
    case "$1" in
    --version) version="$2"; shift 2 ;;
    --routing) KP_ROUTING="$2"; shift 2 ;;
    *) die "up: unknown argument $1" ;;
    esac
  done
  for need in haproxy socat conntrack containerd ctr nsenter unshare; do
    command -v "${need}" >/dev/null || die "missing ${need}: run hack/install-node-deps.sh --kubeadm"
  done
  [[ -d "${OUTPUT_DIR}/images/kubeadm" ]] || die "no kubeadm images: run hack/build-kubeadm-images.sh"
  if [[ -e "${KP_BASE}/current" ]]; then
    die "a kubeadm plane is already running ($(readlink -f "${KP_BASE}/current")): hack/kubeadm-plane.sh down"
  fi
  KP_ID="$(openssl rand -hex 3)"
  KP_RUN="${KP_BASE}/${KP_ID}"
  mkdir -p "${KP_RUN}/nodes"
  [[ "${KP_ROUTING}" =~ ^(peerdiscovery|upstream)$ ]] || die "--routing wants peerdiscovery or upstream"
  echo "${KP_ID}" >"${KP_RUN}/id"
  echo "${KP_ROUTING}" >"${KP_RUN}/routing"
  ln -sfn "${KP_RUN}" "${KP_BASE}/current"
  trap 'log::error "up failed: the plane is left for inspection; hack/kubeadm-plane.sh down removes it"' ERR

  local start i
  start="$(date +%s)"
  log::info "kubeadm plane ${KP_ID} (${KP_ROUTING}): ${KUBEADM_NODES} nodes on 10.254.${KUBEADM_OCTET}.0/24, kubeadm ${version}"
  kp::network_up
  kp::haproxy_up
  kp::keep_pod_logs >/dev/null 2>&1 &
  echo $! >"${KP_RUN}/pod-logs.pid"
  for ((i = 0; i < KUBEADM_NODES; i++)); do
    kp::node_up "${i}"
    kp::install_binary "${i}" kubeadm "${version}"
    kp::install_binary "${i}" kubelet "${version}"
    kp::install_binary "${i}" crictl
    # Where crictl looks after /etc/crictl.yaml: the node's containerd.
    printf 'runtime-endpoint: %s\nimage-endpoint: %s\n' unix:///run/containerd/containerd.sock \
      unix:///run/containerd/containerd.sock >"$(kp::node_dir "${i}")/bin/crictl.yaml"
  done
  local -a imports=()
  for ((i = 0; i < KUBEADM_NODES; i++)); do
    kp::import_images "${i}" &
    imports+=($!)
  done
  for i in "${imports[@]}"; do wait "${i}"; done
  log::info "nodes up, images imported ($(elapsed_since "${start}"))"

  KP_TOKEN="$(kp::on_node 0 kubeadm token generate)"
  KP_CERT_KEY="$(kp::on_node 0 kubeadm certs certificate-key)"
  kp::write_kubeadm_config 0 "${version}"
  log::info "node-0: kubeadm init"
  kp::admin 0 kubeadm init --config /etc/kubernetes/kubeadm/init.yaml --upload-certs \
    >"$(kp::node_dir 0)/log/kubeadm-init.log" 2>&1 || {
    tail -30 "$(kp::node_dir 0)/log/kubeadm-init.log" >&2
    die "kubeadm init failed (log: $(kp::node_dir 0)/log/kubeadm-init.log)"
  }
  # The load balancer checks /readyz from now on, verified with the CA.
  kp::haproxy_up "$(kp::node_dir 0)/etc/kubernetes/pki/ca.crt"
  # The discovery hash, as kubeadm's join documentation computes it.
  KP_CA_HASH="sha256:$(openssl x509 -pubkey -in "$(kp::node_dir 0)/etc/kubernetes/pki/ca.crt" |
    openssl rsa -pubin -outform der 2>/dev/null | openssl dgst -sha256 -hex | sed 's/^.* //')"
  sed "s#server: https://.*#server: https://$(kp::host_ip):6443#" \
    "$(kp::node_dir 0)/etc/kubernetes/admin.conf" >"${KP_RUN}/kubeconfig"
  chmod 0600 "${KP_RUN}/kubeconfig"
  export KUBECONFIG="${KP_RUN}/kubeconfig"
  for ((i = 1; i < KUBEADM_NODES; i++)); do
    kp::write_kubeadm_config "${i}" "${version}"
    log::info "node-${i}: kubeadm join --control-plane"
    kp::admin "${i}" kubeadm join --config /etc/kubernetes/kubeadm/join.yaml \
      >"$(kp::node_dir "${i}")/log/kubeadm-join.log" 2>&1 || {
      tail -30 "$(kp::node_dir "${i}")/log/kubeadm-join.log" >&2
      die "kubeadm join on node-${i} failed"
    }
  done
  for ((i = 0; i < KUBEADM_NODES; i++)); do kp::kube_proxy_up "${i}" "${version}"; done
  for ((i = 0; i < KUBEADM_NODES; i++)); do
    kp::wait "node-${i} Ready at ${version}" 180 kp::node_at "${i}" "${version}"
    kp::wait "node-${i}'s control-plane Pods Running" 180 kp::control_plane_running "${i}"
  done
  if [[ "${KP_ROUTING}" == peerdiscovery ]]; then
    log::info "installing peerdiscovery-apiserver (kubectl apply -k artifacts/deploy/overlays/ha)"
    kp::install_extension
  fi
  log::info "kubeadm plane ready in $(elapsed_since "${start}"): KUBECONFIG=${KP_RUN}/kubeconfig"
}

# kp::install_extension installs peerdiscovery-apiserver as
# docs/operations.md does (kubectl apply -k, then hack/deploy-certs.sh),
# its image imported on every node (no registry here).
kp::install_extension() {
  local i archive
  archive="${OUTPUT_DIR}/images/peerdiscovery-apiserver-$(tr -d '[:space:]' <"${REPO_ROOT}/VERSION").tar"
  [[ -f "${archive}" ]] || die "no ${archive}: run hack/build-images.sh --no-kube"
  for ((i = 0; i < KUBEADM_NODES; i++)); do
    kp::on_node "${i}" ctr -n k8s.io images import --no-unpack=false "${archive}" >/dev/null
  done
  export KUBECONFIG="${KP_RUN}/kubeconfig"
  kp::admin admin kubectl apply -k artifacts/deploy/overlays/ha
  kp::admin admin hack/deploy-certs.sh --dir "${KP_RUN}/deploy-certs"
  for ((i = 0; i < KUBEADM_NODES; i++)); do
    kp::wait "APIService v1alpha1.peerdiscovery.k8s.io Available through node-${i}" 180 \
      kp::apiservice_available "${i}"
  done
}

kp::apiservice_available() {
  [[ "$("$(kubectl_bin)" --server "https://$(kp::node_ip "$1"):6443" get apiservice v1alpha1.peerdiscovery.k8s.io \
    -o jsonpath='{.status.conditions[?(@.type=="Available")].status}')" == True ]]
}

# cmd_upgrade_node I V: docs/operations.md, section 5, step 3 ("Roll"), on
# node I. The commands an admin types go through kp::admin, which records
# them for test/kubeadm's check against that section.
cmd_upgrade_node() {
  kp::load_run
  local i="$1" version="$2" from
  export KUBECONFIG="${KP_RUN}/kubeconfig"
  from="$("$(kubectl_bin)" get node "node-${i}" -o jsonpath='{.status.nodeInfo.kubeletVersion}')"
  log::info "node-${i}: upgrading ${from} -> ${version}"
  # The kubeadm package of the target release (apt-get install kubeadm=...).
  kp::install_binary "${i}" kubeadm "${version}"
  kp::on_node "${i}" kubeadm version -o short
  # The filter build of the target release, patched in before kubeadm
  # writes the manifest.
  if [[ "${KP_ROUTING}" == peerdiscovery ]]; then
    kp::admin "${i}" sed -i "s|kube-apiserver-peerdiscovery:${from}|kube-apiserver-peerdiscovery:${version}|" \
      /etc/kubernetes/patches/kube-apiserver0+json.yaml
  fi
  kp::write_upgrade_config "${i}" "${version}"
  # Out of the load balancer for the node's whole roll: its kube-apiserver
  # restarts twice (kubeadm's manifest, then the kubelet's upgrade).
  kp::lb_set "${i}" drain
  if ((i == 0)); then
    kp::admin "${i}" kubeadm upgrade plan --config /etc/kubernetes/kubeadm/upgrade.yaml
    kp::admin "${i}" kubeadm upgrade apply --config /etc/kubernetes/kubeadm/upgrade.yaml --yes
  else
    kp::admin "${i}" kubeadm upgrade node --config /etc/kubernetes/kubeadm/upgrade.yaml
  fi
  kp::admin admin kubectl drain "node-${i}" --ignore-daemonsets --delete-emptydir-data
  # No Pod whose UID kubeadm's manifest decides runs across a kubelet minor
  # upgrade (drain does not stop static Pods): the new kubelet would take
  # them for orphans and kill them with a 1 s grace. So they stop first,
  # gracefully, kube-apiserver first. etcd has a UID of its own (its patch)
  # and keeps running: a stop of its leader would hand leadership over, and
  # writes in flight then fail.
  kp::admin "${i}" mkdir -p /etc/kubernetes/manifests-stopped
  kp::admin "${i}" mv /etc/kubernetes/manifests/kube-apiserver.yaml /etc/kubernetes/manifests-stopped/
  kp::admin_sh "${i}" "until out=\$(crictl ps -q --name '^kube-apiserver\$') && [ -z \"\$out\" ]; do sleep 1; done"
  kp::admin "${i}" mv /etc/kubernetes/manifests/kube-controller-manager.yaml /etc/kubernetes/manifests/kube-scheduler.yaml \
    /etc/kubernetes/manifests-stopped/
  kp::admin_sh "${i}" "until out=\$(crictl ps -q --name '^(kube-controller-manager|kube-scheduler)\$') && [ -z \"\$out\" ]; do sleep 1; done"
  # The kubelet package, then "systemctl restart kubelet".
  kp::install_binary "${i}" kubelet "${version}"
  kp::node_restart_kubelet "${i}"
  kp::admin "${i}" mv /etc/kubernetes/manifests-stopped/kube-apiserver.yaml \
    /etc/kubernetes/manifests-stopped/kube-controller-manager.yaml /etc/kubernetes/manifests-stopped/kube-scheduler.yaml \
    /etc/kubernetes/manifests/
  kp::admin admin kubectl uncordon "node-${i}"
  # Back in rotation once haproxy's /readyz check passes.
  kp::lb_set "${i}" ready
  kp::wait "node-${i} Ready at ${version}" 180 kp::node_at "${i}" "${version}"
  kp::wait "node-${i}'s control-plane Pods Running" 180 kp::control_plane_running "${i}"
  kp::wait "node-${i} up in the load balancer" 180 kp::lb_up "${i}"
  log::info "node-${i}: upgraded to ${version}"
}

# kp::control_plane_running I: the mirror Pods of node I's four static
# Pods (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) are
# Running.
kp::control_plane_running() {
  [[ "$("$(kubectl_bin)" -n kube-system get pods -l tier=control-plane --field-selector "spec.nodeName=node-$1" \
    -o jsonpath='{range .items[?(@.status.phase=="Running")]}x{end}')" == xxxx ]]
}

kp::node_at() {
  [[ "$("$(kubectl_bin)" get node "node-$1" -o jsonpath='{.status.nodeInfo.kubeletVersion}/{.status.conditions[?(@.type=="Ready")].status}')" == "$2/True" ]]
}

cmd_down() {
  kp::load_run
  kp::down
  rm -f "${KP_BASE}/current"
  log::info "kubeadm plane ${KP_ID} removed (files kept in ${KP_RUN})"
}

cmd_exec() {
  kp::load_run
  local i="$1"
  shift
  kp::on_node "${i}" "$@"
}

case "${1:-}" in
up) shift; cmd_up "$@" ;;
down) shift; cmd_down ;;
exec) shift; cmd_exec "$@" ;;
upgrade-node) shift; cmd_upgrade_node "$@" ;;
*) die "usage: hack/kubeadm-plane.sh up [--version V] [--routing upstream] | upgrade-node I V | exec I CMD... | down" ;;
esac

// Copyright The peerdiscovery Authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Static pods of the node-based plane, in kubeadm's layout: one manifest
// per component in the node's etc/kubernetes/manifests, hostNetwork, the
// node's pki folder mounted at /etc/kubernetes/pki, probes on the
// component's own address, the images of hack/build-images.sh.

// KubeAPIServerImage is the image of kube-apiserver (with the filter) of a
// release.
func KubeAPIServerImage(version string) string { return ImageRegistry + "/kube-apiserver:" + version }

func kubeImage(component, version string) string {
	return ImageRegistry + "/" + component + ":" + version
}

// staticPodNames are the names of the mirror pods the plane must show in
// kube-system: <component>-<node>.
func (c *Cluster) staticPodNames() []string {
	var out []string
	for _, n := range c.nodes.nodes {
		out = append(out, "kube-apiserver-"+n.name)
	}
	if !c.cfg.ControllerManager.Disabled {
		out = append(out, "kube-controller-manager-"+nodeName(controlNode))
	}
	out = append(out, "kube-scheduler-"+nodeName(controlNode))
	return out
}

// podKubeAPIServerArgs is the plane's kube-apiserver command line
// (kubeAPIServerArgs, the process plane's) with the paths as the static
// pod mounts them, plus what a server on a node needs: NodeRestriction,
// and the client certificate and CA for the kubelets.
func (c *Cluster) podKubeAPIServerArgs(s *kubeServer) ([]string, error) {
	p := c.pki
	paths := map[string]string{
		p.caFile:                                 podPKIDir + "/ca.crt",
		s.certs[0]:                               podPKIDir + "/apiserver.crt",
		s.certs[1]:                               podPKIDir + "/apiserver.key",
		p.frontProxyCAFile:                       podPKIDir + "/front-proxy-ca.crt",
		p.frontProxyClientCert:                   podPKIDir + "/front-proxy-client.crt",
		p.frontProxyClientKey:                    podPKIDir + "/front-proxy-client.key",
		p.saKeyFile:                              podPKIDir + "/sa.key",
		p.saPubFile:                              podPKIDir + "/sa.pub",
		filepath.Join(c.runDir, auditPolicyFile): podAuditPolicy,
		filepath.Join(c.runDir, s.name):          "/tmp/kube-apiserver", // --cert-dir: unused with a serving certificate
		c.AuditLogPath(s.index):                  podAuditDir + "/audit.log",
	}
	all := c.kubeAPIServerArgs(s)
	base, extra := all[:len(all)-len(s.spec.ExtraFlags)], all[len(all)-len(s.spec.ExtraFlags):]
	var out []string
	for _, a := range base {
		if name, value, ok := strings.Cut(a, "="); ok {
			if to, mapped := paths[value]; mapped {
				a = name + "=" + to
			} else if strings.HasPrefix(value, c.runDir) {
				return nil, fmt.Errorf("kube-apiserver flag %s: no path in the static pod for %s", name, value)
			}
		}
		out = append(out, a)
	}
	out = append(out,
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate="+podPKIDir+"/apiserver-kubelet-client.crt",
		"--kubelet-client-key="+podPKIDir+"/apiserver-kubelet-client.key",
		"--kubelet-certificate-authority="+podPKIDir+"/ca.crt",
		"--kubelet-preferred-address-types=InternalIP",
	)
	return append(out, extra...), nil
}

func hostPathVolume(name, path string, t corev1.HostPathType) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
}

func httpsProbe(host, path string, port int, period, failures int32, initial int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: host, Path: path, Port: intstr.FromInt32(int32(port)), Scheme: corev1.URISchemeHTTPS,
		}},
		InitialDelaySeconds: initial,
		PeriodSeconds:       period,
		TimeoutSeconds:      15,
		FailureThreshold:    failures,
	}
}

// staticPod is a kubeadm-style control-plane Pod running image with
// command, as the images' user, its mounts read-only unless writable.
func staticPod(component, image string, command []string, env []string, mounts []corev1.VolumeMount, volumes []corev1.Volume, liveness, readiness, startup *corev1.Probe) *corev1.Pod {
	uid := int64(imageUID)
	nonRoot := true
	var envVars []corev1.EnvVar
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		envVars = append(envVars, corev1.EnvVar{Name: k, Value: v})
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      component,
			Namespace: metav1.NamespaceSystem,
			Labels:    map[string]string{"component": component, "tier": "control-plane"},
		},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &nonRoot,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            component,
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent, // present: imported, never pulled
				Command:         command,
				Env:             envVars,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"),
				}},
				VolumeMounts:   mounts,
				LivenessProbe:  liveness,
				ReadinessProbe: readiness,
				StartupProbe:   startup,
			}},
			Volumes: volumes,
		},
	}
}

// kubeAPIServerPod is node n's kube-apiserver static pod for s.
func (c *Cluster) kubeAPIServerPod(n *node, s *kubeServer) (*corev1.Pod, error) {
	args, err := c.podKubeAPIServerArgs(s)
	if err != nil {
		return nil, err
	}
	ip := n.ip.String()
	pod := staticPod("kube-apiserver", KubeAPIServerImage(s.spec.Version), append([]string{"kube-apiserver"}, args...), s.spec.Env,
		[]corev1.VolumeMount{
			{Name: "k8s-certs", MountPath: podPKIDir, ReadOnly: true},
			{Name: "audit-policy", MountPath: podAuditPolicy, ReadOnly: true},
			{Name: "audit-log", MountPath: podAuditDir},
		},
		[]corev1.Volume{
			hostPathVolume("k8s-certs", n.pkiDir(), corev1.HostPathDirectory),
			hostPathVolume("audit-policy", filepath.Join(n.etcKubernetes(), "audit-policy.yaml"), corev1.HostPathFile),
			hostPathVolume("audit-log", c.nodeAuditDir(n.index), corev1.HostPathDirectoryOrCreate),
		},
		// kubeadm's probes.
		httpsProbe(ip, "/livez", securePort, 10, 8, 10),
		httpsProbe(ip, "/readyz", securePort, 1, 3, 0),
		httpsProbe(ip, "/livez", securePort, 10, 24, 10),
	)
	pod.Annotations = map[string]string{"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": ip + ":" + strconv.Itoa(securePort)}
	return pod, nil
}

// controlPlanePods are kube-controller-manager (unless disabled) and
// kube-scheduler, on the control node, each talking to that node's
// kube-apiserver only, as kubeadm sets them up.
func (c *Cluster) controlPlanePods(n *node) []*corev1.Pod {
	ip := n.ip.String()
	v := c.nodes.spec.Version
	pkiMount := corev1.VolumeMount{Name: "k8s-certs", MountPath: podPKIDir, ReadOnly: true}
	pkiVol := hostPathVolume("k8s-certs", n.pkiDir(), corev1.HostPathDirectory)
	conf := func(file string) (corev1.VolumeMount, corev1.Volume) {
		return corev1.VolumeMount{Name: "kubeconfig", MountPath: "/etc/kubernetes/" + file, ReadOnly: true},
			hostPathVolume("kubeconfig", filepath.Join(n.etcKubernetes(), file), corev1.HostPathFile)
	}
	var pods []*corev1.Pod
	if !c.cfg.ControllerManager.Disabled {
		m, vol := conf("controller-manager.conf")
		kubeconfig := "/etc/kubernetes/controller-manager.conf"
		var args []string
		for _, a := range c.controllerManagerArgs(kubeconfig) {
			switch {
			case strings.HasPrefix(a, "--root-ca-file="):
				a = "--root-ca-file=" + podPKIDir + "/ca.crt"
			case a == "--secure-port=0":
				// Served on the node's address, for the kubelet's probe.
				args = append(args, "--bind-address="+ip)
				a = "--secure-port=10257"
			}
			args = append(args, a)
		}
		args = append(args, "--service-account-private-key-file="+podPKIDir+"/sa.key")
		pods = append(pods, staticPod("kube-controller-manager", kubeImage("kube-controller-manager", c.cfg.ControllerManager.Version),
			append([]string{"kube-controller-manager"}, args...), nil,
			[]corev1.VolumeMount{pkiMount, m}, []corev1.Volume{pkiVol, vol},
			httpsProbe(ip, "/healthz", 10257, 10, 8, 10), nil, httpsProbe(ip, "/healthz", 10257, 10, 24, 10)))
	}
	m, vol := conf("scheduler.conf")
	kubeconfig := "/etc/kubernetes/scheduler.conf"
	pods = append(pods, staticPod("kube-scheduler", kubeImage("kube-scheduler", v),
		[]string{"kube-scheduler",
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=" + ip,
			"--leader-elect=true",
			"--v=" + strconv.Itoa(c.cfg.Verbosity),
		}, nil,
		[]corev1.VolumeMount{m}, []corev1.Volume{vol},
		httpsProbe(ip, "/livez", 10259, 10, 8, 10), httpsProbe(ip, "/readyz", 10259, 1, 3, 0), httpsProbe(ip, "/livez", 10259, 10, 24, 10)))
	return pods
}

// writeStaticPod writes pod into node n's manifests folder the way
// kubeadm does: a temporary file in another folder, then a rename, so the
// kubelet never reads half a manifest.
func (c *Cluster) writeStaticPod(n *node, pod *corev1.Pod) error {
	b, err := yaml.Marshal(pod)
	if err != nil {
		return err
	}
	tmp := filepath.Join(n.etcKubernetes(), "."+pod.Name+".yaml.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(n.manifestsDir(), pod.Name+".yaml"))
}

func (c *Cluster) writeKubeAPIServerManifest(n *node, s *kubeServer) error {
	pod, err := c.kubeAPIServerPod(n, s)
	if err != nil {
		return err
	}
	return c.writeStaticPod(n, pod)
}

// ManifestPath is the kube-apiserver static pod manifest of node i.
func (c *Cluster) ManifestPath(i int) string {
	return filepath.Join(c.nodes.nodes[i].manifestsDir(), "kube-apiserver.yaml")
}

// StaticPodStep is what UpgradeStaticPod measured, from the manifest swap.
type StaticPodStep struct {
	// Swapped is when the new manifest was in place; Down when the old
	// server stopped answering /livez; Ready when the new one answered
	// /readyz with the new version.
	Swapped, Down, Ready time.Time
}

// UpgradeStaticPod swaps node i's kube-apiserver manifest for version's,
// as `kubeadm upgrade node` does (the old manifest kept in the node's
// etc/kubernetes/tmp), and waits until the kubelet has replaced the pod and
// the new server is ready. The image must have been imported
// (NodesSpec.UpgradeVersions).
// down, if not nil, is called once the old server stopped answering.
func (c *Cluster) UpgradeStaticPod(ctx context.Context, i int, version string, down func()) (StaticPodStep, error) {
	var st StaticPodStep
	if c.nodes == nil {
		return st, fmt.Errorf("UpgradeStaticPod needs the node-based plane")
	}
	s, err := c.server(i)
	if err != nil {
		return st, err
	}
	if _, ok := c.nodes.images[KubeAPIServerImage(version)]; !ok {
		return st, fmt.Errorf("no image %s on the nodes (NodesSpec.UpgradeVersions)", KubeAPIServerImage(version))
	}
	n := c.nodes.nodes[i]
	c.opMu.Lock()
	defer c.opMu.Unlock()
	backup := filepath.Join(n.etcKubernetes(), "tmp", "kubeadm-backup-manifests-"+time.Now().Format("2006-01-02-15-04-05"))
	if err := os.MkdirAll(backup, 0o700); err != nil {
		return st, err
	}
	if err := copyFile(c.ManifestPath(i), filepath.Join(backup, "kube-apiserver.yaml"), 0o600); err != nil {
		return st, err
	}
	old, oldBinary := s.spec, s.binary
	s.spec.Version = version
	// The host's binary of the release answers which flags it has
	// (hasFlag); hack/build-images.sh built it for the image.
	s.binary = filepath.Join(c.cfg.binDir(), "kube-apiserver-"+version, "kube-apiserver")
	if err := c.writeKubeAPIServerManifest(n, s); err != nil {
		s.spec, s.binary = old, oldBinary
		return st, err
	}
	st.Swapped = time.Now()
	c.cfg.Logf("%s: kube-apiserver manifest swapped %s -> %s", n.name, old.Version, version)
	cfg := c.AdminConfig(i)
	cfg.Timeout = 2 * time.Second
	client, err := restHTTPClient(cfg)
	if err != nil {
		return st, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	err = c.waitFor(ctx, nil, s.name+" to stop after the manifest swap", func(ctx context.Context) (bool, string) {
		ok, _ := httpOK(ctx, client, cfg.Host+"/livez")
		return !ok, "still answering"
	})
	if err != nil {
		return st, err
	}
	st.Down = time.Now()
	if down != nil {
		down()
	}
	err = c.waitFor(ctx, nil, s.name+" "+version+" ready", func(ctx context.Context) (bool, string) {
		if ok, detail := httpOK(ctx, client, cfg.Host+"/readyz"); !ok {
			return false, detail
		}
		v, err := serverVersion(ctx, client, cfg.Host)
		if err != nil {
			return false, err.Error()
		}
		return v == version, "version " + v
	})
	if err != nil {
		return st, err
	}
	st.Ready = time.Now()
	c.cfg.Logf("%s: %s ready %s after the swap (down after %s)", n.name, version, st.Ready.Sub(st.Swapped).Round(100*time.Millisecond), st.Down.Sub(st.Swapped).Round(100*time.Millisecond))
	return st, nil
}

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

package main

import (
	"fmt"
	"path"
	"strings"
)

// Registry is where the images are named, what a kubeadm user would point
// ClusterConfiguration.imageRepository at (kubeadm names the control-plane
// images <imageRepository>/kube-apiserver:<version>, and the sandbox image
// <imageRepository>/pause:<tag>).
const Registry = "registry.k8s.io/peerdiscovery"

// Users of the images: distroless's nonroot, upstream pause's, and root
// for the images kubeadm runs as upstream does.
const (
	NonRootUser = "65532:65532"
	PauseUser   = "65535:65535"
	RootUser    = "0:0"
)

// Kind is a family of images that share their layout.
type Kind string

const (
	// KindExtension is peerdiscovery-apiserver, as the Dockerfile's final
	// stage describes it.
	KindExtension Kind = "extension"
	// KindKube is a Kubernetes component (kube-apiserver with the filter,
	// kube-controller-manager, kube-scheduler): the binary on PATH in
	// /usr/local/bin, as upstream's images and kubeadm's manifests
	// (command: [kube-apiserver, ...]) expect.
	KindKube Kind = "kube"
	// KindUpstream is a Kubernetes component (or etcd) laid out as
	// upstream publishes it for kubeadm: the binary on PATH in
	// /usr/local/bin, run as root, since kubeadm's manifests set no user
	// and mount root-only files (its rootless mode is a feature gate).
	KindUpstream Kind = "upstream"
	// KindPause is the Pods' sandbox image.
	KindPause Kind = "pause"
)

// Spec is one image: the base layer plus one binary.
type Spec struct {
	Kind Kind
	// Ref is the image reference, e.g.
	// registry.k8s.io/peerdiscovery/kube-apiserver:v1.37.2.
	Ref string
	// Binary is the file on this machine that goes into the image at Path.
	Binary string
	Path   string
	// User, Entrypoint, WorkingDir and ExposedPorts are the image config.
	User         string
	Entrypoint   []string
	WorkingDir   string
	ExposedPorts []string
}

// NewSpec is the Spec of an image of kind k named ref with binary.
func NewSpec(k Kind, ref, binary string) (Spec, error) {
	name, tag, ok := splitRef(ref)
	if !ok {
		return Spec{}, fmt.Errorf("image reference %q has no tag", ref)
	}
	s := Spec{Kind: k, Ref: ref, Binary: binary, User: NonRootUser, WorkingDir: "/home/nonroot"}
	switch k {
	case KindExtension:
		// The Dockerfile: COPY ... /peerdiscovery-apiserver, USER
		// 65532:65532, EXPOSE 6443, ENTRYPOINT ["/peerdiscovery-apiserver"]
		// (images_test.go checks the two agree).
		s.Path = "/peerdiscovery-apiserver"
		s.ExposedPorts = []string{"6443/tcp"}
	case KindKube:
		s.Path = "/usr/local/bin/" + path.Base(name)
	case KindUpstream:
		// Named by the binary: the filter build of kube-apiserver goes
		// under another image name (docs/operations.md), same command.
		s.Path, s.User, s.WorkingDir = "/usr/local/bin/"+path.Base(binary), RootUser, "/"
	case KindPause:
		s.Path, s.User, s.WorkingDir = "/pause", PauseUser, "/"
	default:
		return Spec{}, fmt.Errorf("unknown image kind %q (want %s, %s, %s or %s)", k, KindExtension, KindKube, KindUpstream, KindPause)
	}
	s.Entrypoint = []string{s.Path}
	_ = tag
	return s, nil
}

// splitRef splits name:tag (the last colon after the last slash).
func splitRef(ref string) (name, tag string, ok bool) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") || i == len(ref)-1 {
		return ref, "", false
	}
	return ref[:i], ref[i+1:], true
}

// ArchiveName is the file name of ref's OCI archive:
// registry.k8s.io/peerdiscovery/kube-apiserver:v1.37.2 ->
// kube-apiserver-v1.37.2.tar.
func ArchiveName(ref string) string {
	name, tag, _ := splitRef(ref)
	return path.Base(name) + "-" + tag + ".tar"
}

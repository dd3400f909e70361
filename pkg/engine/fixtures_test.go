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

package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// ---- documents ----

func res(name string) apidiscoveryv2.APIResourceDiscovery {
	return apidiscoveryv2.APIResourceDiscovery{Resource: name, Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list", "watch"}}
}

func ver(v string, rs ...string) apidiscoveryv2.APIVersionDiscovery {
	out := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
	for _, r := range rs {
		out.Resources = append(out.Resources, res(r))
	}
	return out
}

func grp(name string, vs ...apidiscoveryv2.APIVersionDiscovery) apidiscoveryv2.APIGroupDiscovery {
	return apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}, Versions: vs}
}

// document is a peer's discovery: core/v1 pods plus the given /apis groups,
// with content ETags.
func document(version string, apis ...apidiscoveryv2.APIGroupDiscovery) Document {
	api := []apidiscoveryv2.APIGroupDiscovery{grp("", ver("v1", "pods", "configmaps"))}
	apiETag, err := merge.ETag(api)
	if err != nil {
		panic(err)
	}
	apisETag, err := merge.ETag(apis)
	if err != nil {
		panic(err)
	}
	return Document{API: api, APIs: apis, APIETag: apiETag, APIsETag: apisETag, Version: version}
}

func describe(v compute.Output) string {
	var b strings.Builder
	for _, p := range v.Peers {
		c := p.Status.Conditions[0]
		fmt.Fprintf(&b, "peer %s (%s) at %s sources %v ready=%s/%s stale=%v left=%v resources=%d\n", p.Name, p.Spec.ServerID, p.Spec.Endpoint,
			p.Spec.Sources, c.Status, c.Reason, p.Status.Stale, p.Status.LeftTime != nil, p.Status.ResourceCount)
	}
	for _, r := range v.Routes {
		fmt.Fprintf(&b, "route %s peers %+v clusterWide=%v %s\n", r.Name, r.Status.Peers, r.Status.ClusterWide, r.Status.ClusterWideSource)
	}
	return b.String()
}

func peerOf(v compute.Output, id string) *v1alpha1.APIServerPeer {
	for i := range v.Peers {
		if v.Peers[i].Spec.ServerID == id {
			return &v.Peers[i]
		}
	}
	return nil
}

func routeOf(v compute.Output, name string) *v1alpha1.PeerRoutingTable {
	for i := range v.Routes {
		if v.Routes[i].Name == name {
			return &v.Routes[i]
		}
	}
	return nil
}

func readyCond(p *v1alpha1.APIServerPeer) metav1.Condition {
	for _, c := range p.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

func isReady(v compute.Output, id string) bool {
	p := peerOf(v, id)
	return p != nil && readyCond(p).Status == metav1.ConditionTrue
}

func hasGroupVersion(v compute.Output, g, ver string) bool {
	if v.Discovery == nil {
		return false
	}
	for _, list := range [][]apidiscoveryv2.APIGroupDiscovery{v.Discovery.Status.API.Items, v.Discovery.Status.APIs.Items} {
		for _, gr := range list {
			if gr.Name != g {
				continue
			}
			for _, vr := range gr.Versions {
				if vr.Version == ver {
					return true
				}
			}
		}
	}
	return false
}

func routedGV(v compute.Output, g, ver string) bool {
	for _, r := range v.Routes {
		if r.Spec.Group == g && r.Spec.Version == ver {
			return true
		}
	}
	return false
}

// ---- objects ----

// regLease is a registration lease renewed now, lasting a day so that
// stepping the fake clock does not make it lapse.
func regLease(id, endpoint, version string, now time.Time) *coordinationv1.Lease {
	l := peerlease.NewRegistrationLease(nil, id, endpoint, version, "", now)
	l.Spec.LeaseDurationSeconds = ptr.To[int32](86400)
	return l
}

func identityLease(name, address string, now time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: peerlease.Namespace,
			Labels: map[string]string{peerlease.IdentityLabel: peerlease.IdentityComponent},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name + "_0b5e1c4d-8f2a-4c3e-9d7b-6a1f2e3d4c5b"),
			LeaseDurationSeconds: ptr.To[int32](3600),
			RenewTime:            ptr.To(metav1.NewMicroTime(now)),
		},
	}
	if address != "" {
		l.Annotations = map[string]string{peerlease.PeerAdvertiseAddressAnnotation: address}
	}
	return l
}

func kubernetesSlice(name string, port int32, addresses ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addresses {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func crd(group, plural string, versions map[string]bool) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: "Thing"},
		},
	}
	names := make([]string, 0, len(versions))
	for v := range versions {
		names = append(names, v)
	}
	slices.Sort(names)
	for _, v := range names {
		c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: versions[v], Storage: v == names[0]})
	}
	return c
}

func apiService(group, version string, service bool) *apiregistrationv1.APIService {
	as := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: version + "." + group},
		Spec:       apiregistrationv1.APIServiceSpec{Group: group, Version: version, GroupPriorityMinimum: 100, VersionPriority: 100},
	}
	if service {
		as.Spec.Service = &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server", Port: ptr.To[int32](443)}
	}
	return as
}

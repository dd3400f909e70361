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

// Package adminview computes what an admin asks during an upgrade — who
// serves what, where requests go, what a drain would break — from the
// peerdiscovery.k8s.io objects, and renders it as text. It is pure: objects
// in, reports out; the kubectl plugin (pkg/cmd/plugin) does the I/O. Every
// routing answer comes from pkg/routing's Decide, the filter's own rule.
package adminview

import (
	"cmp"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/version"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// Server is one kube-apiserver as the status shows it.
type Server struct {
	// Key is the short name of its matrix column: A, B, C, ...
	Key      string `json:"key"`
	Name     string `json:"name"`
	ServerID string `json:"serverID"`
	Version  string `json:"version"`
	Endpoint string `json:"endpoint"`
	Ready    bool   `json:"ready"`
	// Left: the server shut down; it stays listed as a tombstone.
	Left bool `json:"left,omitempty"`
	// Reason is the Ready condition's reason when not ready.
	Reason    string     `json:"reason,omitempty"`
	LastSync  *time.Time `json:"lastSyncTime,omitempty"`
	Stale     bool       `json:"stale,omitempty"`
	Resources int32      `json:"resources"`
}

// Cell is what a request for one GVR does when it lands on one server.
type Cell struct {
	// Decision is the filter's: Local (the server serves it), Proxy,
	// Unavailable (503) or NotFound (404).
	Decision v1alpha1.RouteDecision `json:"decision"`
	// To is the server ID a Proxy goes to first.
	To string `json:"to,omitempty"`
}

// SkewRow is one GVR that not every server serves.
type SkewRow struct {
	GVR string `json:"gvr"`
	// Cells are in the order of Status.Servers (tombstones: empty).
	Cells []Cell `json:"cells"`
}

// Status is the one-screen view of the control plane.
type Status struct {
	Servers []Server `json:"servers"`
	// Routes is the number of GVRs in the routing tables.
	Routes int `json:"routes"`
	// Skew lists the GVRs not served by every server.
	Skew []SkewRow `json:"skew"`
}

// Servers orders the peers oldest version first (then by ID) and gives
// each a column key.
func Servers(peers []v1alpha1.APIServerPeer) []Server {
	out := make([]Server, 0, len(peers))
	for i := range peers {
		p := &peers[i]
		rp := routing.PeerFromObject(p)
		s := Server{
			Name: p.Name, ServerID: p.Spec.ServerID, Version: p.Spec.BinaryVersion, Endpoint: p.Spec.Endpoint,
			Ready: rp.Ready, Left: rp.Left, Stale: p.Status.Stale, Resources: p.Status.ResourceCount,
		}
		if p.Status.LastSyncTime != nil {
			t := p.Status.LastSyncTime.Time
			s.LastSync = &t
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1alpha1.ConditionReady && !rp.Ready {
				s.Reason = c.Reason
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Server) int {
		return cmp.Or(compareVersions(a.Version, b.Version), cmp.Compare(a.ServerID, b.ServerID))
	})
	for i := range out {
		out[i].Key = columnKey(i)
	}
	return out
}

// columnKey is A..Z, then AA, AB, ...
func columnKey(i int) string {
	if i < 26 {
		return string(rune('A' + i))
	}
	return columnKey(i/26-1) + columnKey(i%26)
}

// NewStatus builds the status from the listed objects.
func NewStatus(peers []v1alpha1.APIServerPeer, tables []v1alpha1.PeerRoutingTable) Status {
	t := routing.NewTableFromObjects(tables, peers)
	view, now := &routing.Snapshot{Table: t}, time.Now()
	st := Status{Servers: Servers(peers), Routes: t.Len(), Skew: []SkewRow{}}
	for _, r := range t.Routes() {
		if r.ServedByAll || r.ClusterWide {
			continue
		}
		row := SkewRow{GVR: routing.GVRString(r.GVR), Cells: make([]Cell, len(st.Servers))}
		for i, s := range st.Servers {
			if s.Left {
				continue
			}
			res := routing.Decide(view.As(s.ServerID, routing.ListedLocal(t, s.ServerID)), routing.Request{IsResourceRequest: true, GVR: r.GVR}, now)
			row.Cells[i].Decision = res.Decision
			if res.Decision == v1alpha1.RouteProxy {
				row.Cells[i].To = res.Candidates[0].ID
			}
		}
		st.Skew = append(st.Skew, row)
	}
	return st
}

// compareVersions orders "v1.36.3" before "v1.37.2" and "v1.37.10"
// after "v1.37.9"; anything unparsable sorts last, by text.
func compareVersions(a, b string) int {
	va, erra := version.ParseGeneric(a)
	vb, errb := version.ParseGeneric(b)
	switch {
	case erra == nil && errb == nil:
		if va.LessThan(vb) {
			return -1
		}
		if vb.LessThan(va) {
			return 1
		}
		return 0
	case erra == nil:
		return -1
	case errb == nil:
		return 1
	}
	return cmp.Compare(a, b)
}

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

package routing

import (
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// ListedLocal says a server serves a GVR when its table lists the server
// and the server has not left. It is how RouteReview, the status matrix and
// the drain what-if see a server's own APIs from outside it (the filter
// inside the server reads its real local discovery instead).
func ListedLocal(t *Table, self string) Local {
	return listedLocal{t: t, self: self}
}

type listedLocal struct {
	t    *Table
	self string
}

func (l listedLocal) Serves(gvr schema.GroupVersionResource) bool {
	for _, p := range l.t.Lookup(gvr).peers() {
		if p.ID == l.self && !p.Left {
			return true
		}
	}
	return false
}

// ServesGroupVersion implements GroupLocal.
func (l listedLocal) ServesGroupVersion(gv schema.GroupVersion) bool {
	if l.t == nil {
		return false
	}
	return slices.ContainsFunc(l.t.byGV[gv], func(r *Route) bool { return l.Serves(r.GVR) })
}

// ServesGroup implements GroupLocal.
func (l listedLocal) ServesGroup(group string) bool {
	for _, gv := range l.t.GroupVersions() {
		if gv.Group == group && l.ServesGroupVersion(gv) {
			return true
		}
	}
	return false
}

func (r *Route) peers() []Peer {
	if r == nil {
		return nil
	}
	return r.Peers
}

// Routes lists the routes ordered by group, version and resource.
func (t *Table) Routes() []*Route {
	if t == nil {
		return nil
	}
	out := make([]*Route, 0, len(t.routes))
	for _, r := range t.routes {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *Route) int { return compareGVR(a.GVR, b.GVR) })
	return out
}

func compareGVR(a, b schema.GroupVersionResource) int {
	if c := strings.Compare(a.Group, b.Group); c != 0 {
		return c
	}
	if c := strings.Compare(a.Version, b.Version); c != 0 {
		return c
	}
	return strings.Compare(a.Resource, b.Resource)
}

// Without is the table as it would be once the given servers shut down: a
// departing server's registration Lease marks it left, and the filter keeps
// it in the tables as a tombstone (503, not 404) but never proxies to it.
func (t *Table) Without(ids ...string) *Table {
	gone := map[string]bool{}
	for _, id := range ids {
		gone[id] = true
	}
	out := &Table{routes: make(map[schema.GroupVersionResource]*Route, t.Len()), byGV: map[schema.GroupVersion][]*Route{}, peers: map[string]Peer{}}
	var peers map[string]Peer
	if t != nil {
		peers = t.peers
	}
	for id, p := range peers {
		if gone[id] {
			p.Ready, p.Left = false, true
		}
		out.peers[id] = p
	}
	for _, r := range t.Routes() {
		c := *r
		c.Peers = slices.Clone(r.Peers)
		for i := range c.Peers {
			if gone[c.Peers[i].ID] {
				c.Peers[i].Ready, c.Peers[i].Left = false, true
			}
		}
		out.routes[c.GVR] = &c
		out.byGV[c.GVR.GroupVersion()] = append(out.byGV[c.GVR.GroupVersion()], &c)
	}
	return out
}

// Drain is what would change if some servers went away now.
type Drain struct {
	// Unavailable are the GVRs that some remaining server would answer
	// with 503: every server left that serves them is gone or not ready.
	Unavailable []DrainedRoute
	// FailOver are the GVRs that remaining servers proxy today with a
	// drained server among the candidates, and would proxy to the others.
	FailOver []DrainedRoute
}

// DrainedRoute is one GVR of a Drain, with what each affected remaining
// server would do with a request for it.
type DrainedRoute struct {
	GVR schema.GroupVersionResource
	// From maps each affected remaining server to its decision after the
	// drain: the new first candidate, or "" for 503.
	From map[string]string
}

// Without is the snapshot as it would be once the given servers shut
// down: the table's Without, and their registration Leases recording the
// departure at now.
func (s *Snapshot) Without(now time.Time, ids ...string) *Snapshot {
	out := *s
	out.Table = s.Table.Without(ids...)
	if s.Records != nil {
		out.Records = maps.Clone(s.Records)
		for _, id := range ids {
			if r, ok := out.Records[id]; ok {
				c := *r
				c.Departed, c.DepartedAt = true, now
				out.Records[id] = &c
			}
		}
	}
	return &out
}

// WhatIfDrained computes a Drain with the filter's own decision: for every
// route and every remaining server, Decide on the view (view.Table and
// view.Records) before and after the servers leave at now. servers are
// the IDs of every known server.
func WhatIfDrained(view *Snapshot, now time.Time, servers []string, drained ...string) Drain {
	t := view.Table
	after := view.Without(now, drained...)
	var remaining []string
	for _, s := range servers {
		if !slices.Contains(drained, s) {
			remaining = append(remaining, s)
		}
	}
	var d Drain
	for _, r := range t.Routes() {
		req := Request{IsResourceRequest: true, GVR: r.GVR}
		unavailable, failOver := map[string]string{}, map[string]string{}
		for _, s := range remaining {
			if slices.ContainsFunc(r.Peers, func(p Peer) bool { return p.ID == s && p.Left }) {
				continue
			}
			was := Decide(view.As(s, ListedLocal(t, s)), req, now)
			then := Decide(after.As(s, ListedLocal(after.Table, s)), req, now)
			switch {
			case then.Decision == v1alpha1.RouteUnavailable && was.Decision != v1alpha1.RouteUnavailable:
				unavailable[s] = ""
			case then.Decision == v1alpha1.RouteProxy && slices.ContainsFunc(was.Candidates, func(p Peer) bool { return slices.Contains(drained, p.ID) }):
				failOver[s] = then.Candidates[0].ID
			}
		}
		if len(unavailable) > 0 {
			d.Unavailable = append(d.Unavailable, DrainedRoute{GVR: r.GVR, From: unavailable})
		} else if len(failOver) > 0 {
			d.FailOver = append(d.FailOver, DrainedRoute{GVR: r.GVR, From: failOver})
		}
	}
	return d
}

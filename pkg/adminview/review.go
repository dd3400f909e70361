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

package adminview

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// Drain is what would change if some servers went away now.
type Drain struct {
	// Servers are every known server, with their column keys.
	Servers []Server `json:"servers"`
	Drained []Server `json:"drained"`
	// Unavailable GVRs would have no ready server left: the listed
	// remaining servers would answer 503 (with Retry-After) for them.
	Unavailable []DrainRow `json:"unavailable"`
	// FailOver GVRs are proxied today with a drained server among the
	// candidates; the listed servers would proxy them to the others.
	FailOver []DrainRow `json:"failOver"`
}

// DrainRow is one GVR of a Drain.
type DrainRow struct {
	GVR   string `json:"gvr"`
	Moves []Move `json:"from"`
}

// Move is what one remaining server would do with a request for the GVR.
type Move struct {
	Server string `json:"server"`
	// To is the server it would proxy to first; empty for 503.
	To string `json:"to,omitempty"`
}

// NewDrain answers "what if these servers went away now", by name or
// server ID, with the filter's own decision (routing.WhatIfDrained).
func NewDrain(peers []v1alpha1.APIServerPeer, tables []v1alpha1.PeerRoutingTable, names []string) (Drain, error) {
	servers := Servers(peers)
	drained, err := Resolve(servers, names...)
	if err != nil {
		return Drain{}, err
	}
	d := Drain{Servers: servers, Drained: drained, Unavailable: []DrainRow{}, FailOver: []DrainRow{}}
	var live, gone []string
	for _, s := range servers {
		if !s.Left {
			live = append(live, s.ServerID)
		}
	}
	for _, s := range drained {
		gone = append(gone, s.ServerID)
	}
	// The API objects alone: the admin's view has no registration Leases.
	w := routing.WhatIfDrained(&routing.Snapshot{Table: routing.NewTableFromObjects(tables, peers)}, time.Now(), live, gone...)
	d.Unavailable = drainRows(w.Unavailable)
	d.FailOver = drainRows(w.FailOver)
	return d, nil
}

func drainRows(in []routing.DrainedRoute) []DrainRow {
	out := make([]DrainRow, 0, len(in))
	for _, r := range in {
		row := DrainRow{GVR: routing.GVRString(r.GVR)}
		for _, from := range slices.Sorted(maps.Keys(r.From)) {
			row.Moves = append(row.Moves, Move{Server: from, To: r.From[from]})
		}
		out = append(out, row)
	}
	return out
}

// Resolve finds servers by APIServerPeer name, server ID, or binary version
// (every server of that version that has not left). An unknown name is an
// error that lists the known ones: a typo must not answer "nothing changes".
func Resolve(servers []Server, names ...string) ([]Server, error) {
	var out []Server
	add := func(s Server) {
		if !slices.ContainsFunc(out, func(o Server) bool { return o.ServerID == s.ServerID }) {
			out = append(out, s)
		}
	}
	for _, n := range names {
		if i := slices.IndexFunc(servers, func(s Server) bool { return s.Name == n || s.ServerID == n }); i >= 0 {
			add(servers[i])
			continue
		}
		found := false
		for _, s := range servers {
			if s.Version == n && !s.Left {
				add(s)
				found = true
			}
		}
		if found {
			continue
		}
		known := make([]string, 0, len(servers))
		for _, s := range servers {
			known = append(known, fmt.Sprintf("%s (%s)", s.Name, s.Version))
		}
		if len(known) == 0 {
			return nil, fmt.Errorf("unknown server %q: peerdiscovery knows no kube-apiserver yet", n)
		}
		return nil, fmt.Errorf("unknown server %q; known servers: %s", n, strings.Join(known, ", "))
	}
	return out, nil
}

// Explain is a RouteReview's answer, with the servers named.
type Explain struct {
	Verb string `json:"verb"`
	Path string `json:"path"`
	// From is the server the request lands on; nil: one that serves only
	// what every server serves.
	From   *Server                    `json:"from,omitempty"`
	Review v1alpha1.RouteReviewStatus `json:"review"`
	// Candidates are the review's candidates with their versions, in the
	// review's order.
	Candidates []Server `json:"candidates"`
	Sentence   string   `json:"sentence"`
}

// NewExplain names the servers of a RouteReview's status and says it in
// one sentence.
func NewExplain(verb, path string, from *Server, servers []Server, st v1alpha1.RouteReviewStatus) Explain {
	e := Explain{Verb: strings.ToLower(verb), Path: path, From: from, Review: st, Candidates: []Server{}}
	for _, c := range st.Candidates {
		s := Server{ServerID: c.ServerID, Name: c.ServerID, Endpoint: c.Endpoint, Ready: c.Ready, Left: c.Left}
		if i := slices.IndexFunc(servers, func(s Server) bool { return s.ServerID == c.ServerID }); i >= 0 {
			s = servers[i]
		}
		e.Candidates = append(e.Candidates, s)
	}
	on := "On a server that serves only what every server serves"
	if from != nil {
		on = fmt.Sprintf("On %s (%s)", from.Name, from.Version)
	}
	var what string
	switch st.Decision {
	case v1alpha1.RouteLocal:
		what = "is served by that server itself"
	case v1alpha1.RouteProxy:
		what = "is proxied to " + st.Target
		if i := slices.IndexFunc(e.Candidates, func(s Server) bool { return s.ServerID == st.Target }); i >= 0 && e.Candidates[i].Version != "" {
			what += " (" + e.Candidates[i].Version + ")"
		}
	case v1alpha1.RouteUnavailable:
		what = "gets 503 Service Unavailable with Retry-After"
	case v1alpha1.RouteNotFound:
		what = "gets 404 Not Found"
	default:
		what = "is decided " + string(st.Decision)
	}
	e.Sentence = fmt.Sprintf("%s, %s %s %s: %s.", on, e.Verb, path, what, st.Reason)
	return e
}

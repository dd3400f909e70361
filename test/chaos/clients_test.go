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

package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/test/workload"
)

// soakOf is a soak of 100 s at 5 kinds × 2 servers, with n successful
// operations of each kind through each server taking took, and the
// operations given.
func soakOf(n int, took time.Duration, extra ...workload.Sample) *Result {
	r := &Result{Seed: 7, End: 100 * s, Served: map[string][]int{"configmaps": {0, 1}}}
	for _, k := range Kinds {
		for srv := range 2 {
			for range n {
				r.Samples = append(r.Samples, workload.Sample{Kind: k.Name, Server: srv, Verb: "get", Code: 200, Took: took})
			}
		}
	}
	r.Samples = append(r.Samples, extra...)
	return r
}

func invariantsOf(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		if !slices.Contains(out, v.Invariant) {
			out = append(out, v.Invariant)
		}
	}
	slices.Sort(out)
	return out
}

func TestCheckClients(t *testing.T) {
	const rate = 10 // floor: 0.2 × 10/s × 100 s / (5 kinds × 2 servers) = 20
	slow := workload.Sample{Kind: "configmaps", Verb: "get", Code: 200, Took: 10 * s}
	failed := workload.Sample{Kind: "configmaps", Verb: "get", Code: 503}
	up := soakOf(30, 100*time.Millisecond, failed, failed)
	up.Skipped = 10
	for _, c := range []struct {
		name     string
		ours     *Result
		upstream *Result
		bounds   *ClientBounds
		want     []string
	}{
		{"as good as upstream", soakOf(30, 100*time.Millisecond, failed), up, nil, nil},
		{"slower than upstream, under a second", soakOf(30, 900*time.Millisecond), up, nil, nil},
		{"p99 over a second and upstream's", soakOf(30, 100*time.Millisecond, slices.Repeat([]workload.Sample{slow}, 5)...), up, nil, []string{InvClientLatency}},
		{"more failures", soakOf(30, 100*time.Millisecond, failed, failed, failed), up, nil, []string{InvClientFailed}},
		{"nothing done", &Result{Seed: 7, End: 100 * s, Served: up.Served}, up, nil, []string{InvClientFloor}},
		{"one path starved", soakOf(19, 100*time.Millisecond), nil, nil, []string{InvClientFloor}},
		{"against bounds", soakOf(30, 100*time.Millisecond, failed, failed), nil, &ClientBounds{Seed: 7, P99ToSuccess: 200 * time.Millisecond, Failed: 1}, []string{InvClientFailed}},
		{"bounds that leave failures unchecked: p99 still checked", soakOf(30, 100*time.Millisecond, append(slices.Repeat([]workload.Sample{slow}, 5), failed, failed)...), nil, &ClientBounds{Seed: 7, P99ToSuccess: 200 * time.Millisecond, Failed: -1, Skipped: -1}, []string{InvClientLatency}},
		{"CI's bounds against a soak whose p99 is over a second", func() *Result {
			r := soakOf(30, 100*time.Millisecond, slices.Repeat([]workload.Sample{slow}, 5)...)
			r.Seed = CISeed
			return r
		}(), nil, CIClientBounds, []string{InvClientLatency}},
		{"CI's bounds against a soak over its failed and skipped limits", func() *Result {
			r := soakOf(30, 100*time.Millisecond, slices.Repeat([]workload.Sample{failed}, CIClientBounds.Failed+1)...)
			r.Seed, r.Skipped = CISeed, CIClientBounds.Skipped+1
			return r
		}(), nil, CIClientBounds, []string{InvClientFailed, InvClientSkipped}},
		{"CI's bounds at its limits", func() *Result {
			r := soakOf(3000, 100*time.Millisecond, slices.Repeat([]workload.Sample{failed}, CIClientBounds.Failed)...)
			r.Seed, r.Skipped = CISeed, CIClientBounds.Skipped
			return r
		}(), nil, CIClientBounds, nil},
		{"bounds of another seed: floor only", soakOf(30, 100*time.Millisecond, failed, failed), nil, &ClientBounds{Seed: 8}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := invariantsOf(CheckClients(c.ours, c.upstream, c.bounds, rate))
			if !slices.Equal(got, c.want) {
				t.Errorf("violations of %v, want %v", got, c.want)
			}
		})
	}
	skipped := soakOf(30, 100*time.Millisecond)
	skipped.Skipped = 13
	if vs := CheckClients(skipped, up, nil, rate); len(vs) != 1 || vs[0].Invariant != InvClientSkipped || !strings.Contains(vs[0].Detail, "over 12") {
		t.Errorf("13 skipped against upstream's 10: %+v", vs)
	}
}

// FailedOrSlow counts failures and successes over MinLatencyBar, watches
// left out, as P99ToSuccess leaves them out.
func TestClientsFailedOrSlow(t *testing.T) {
	r := &Result{Samples: []workload.Sample{
		{Kind: "configmaps", Verb: "get", Code: 200, Took: 10 * time.Millisecond},
		{Kind: "configmaps", Verb: "get", Code: 200, Took: MinLatencyBar},
		{Kind: "configmaps", Verb: "get", Code: 200, Took: MinLatencyBar + time.Millisecond},
		{Kind: "configmaps", Verb: "list", Code: 200, Took: 9 * time.Second},
		{Kind: "configmaps", Verb: "create", Code: 503, Took: time.Millisecond},
		{Kind: "configmaps", Verb: "get", Code: 404, Took: 20 * time.Second},
		{Kind: "configmaps", Verb: "watch", Code: 200, Took: 15 * time.Second},
	}}
	c := ClientsOf(r)
	if c.FailedOrSlow != 4 || c.Failed != 2 || c.Succeeded != 4 {
		t.Fatalf("failed or slow %d, failed %d, succeeded %d; want 4, 2, 4", c.FailedOrSlow, c.Failed, c.Succeeded)
	}
}

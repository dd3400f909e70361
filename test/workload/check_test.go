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

package workload

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The write check's verdicts, on hand-made records and lists.
func TestCheckWrites(t *testing.T) {
	stored := func(op int64, names ...string) []unstructured.Unstructured {
		var out []unstructured.Unstructured
		for _, n := range names {
			u := unstructured.Unstructured{}
			u.SetName(n)
			u.SetLabels(map[string]string{OpLabel: fmt.Sprint(op)})
			out = append(out, u)
		}
		return out
	}
	creates := []*CreateRecord{
		{Kind: "configmaps", Op: 1, Acked: true, Name: "a"},                         // stored once
		{Kind: "configmaps", Op: 2, Acked: true, Name: "b"},                         // lost
		{Kind: "configmaps", Op: 3, Acked: true, Name: "c", DeleteAcked: true},      // still present
		{Kind: "configmaps", Op: 4},                                                 // unacked, stored twice
		{Kind: "configmaps", Op: 5},                                                 // unacked, absent
		{Kind: "configmaps", Op: 6, Acked: true, Name: "f", DeleteUncertain: true},  // either
		{Kind: "configmaps", Op: 7, Acked: true, Name: "g", NamespaceDeleted: true}, // CheckNamespaces' part
	}
	lists := map[string][]unstructured.Unstructured{"configmaps": append(append(append(stored(1, "a"), stored(3, "c")...), stored(4, "d1", "d2")...), stored(6, "f")...)}
	wc := CheckWrites(creates, lists)
	if wc.OK() || wc.FoundOnce != 1 || fmt.Sprint(wc.Lost) != "[configmaps/2 b]" || fmt.Sprint(wc.StillPresent) != "[configmaps/3 c]" ||
		fmt.Sprint(wc.Duplicated) != "[configmaps/4 ×2]" || wc.UnackedStored != 1 || wc.UnackedAbsent != 1 || wc.DeletesUncertain != 1 || wc.InDeletedNamespaces != 1 {
		t.Fatalf("%+v", wc)
	}
	if ok := CheckWrites(creates[:1], map[string][]unstructured.Unstructured{"configmaps": stored(1, "a")}); !ok.OK() {
		t.Fatalf("%+v", ok)
	}
}

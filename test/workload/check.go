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
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// QuorumLists reads every kind's objects of run in every namespace, by
// kind name, each through clientFor(kind) (a server that serves it). A
// list with no resourceVersion is a quorum read from etcd. Each list is
// retried for up to a minute (a fault may still be healing).
func QuorumLists(ctx context.Context, kinds []Kind, clientFor func(Kind) dynamic.Interface, run string) (map[string][]unstructured.Unstructured, error) {
	out := map[string][]unstructured.Unstructured{}
	for _, k := range kinds {
		var list *unstructured.UnstructuredList
		var lastErr error
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			list, lastErr = clientFor(k).Resource(k.GVR).List(ctx, metav1.ListOptions{LabelSelector: RunLabel + "=" + run})
			return lastErr == nil, nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w (last error: %v)", k, err, lastErr)
		}
		out[k.Name] = list.Items
	}
	return out, nil
}

// WriteCheck compares what the clients were told with what is stored.
type WriteCheck struct {
	Creates int `json:"creates"`
	Acked   int `json:"acked"`
	// FoundOnce: acked, not deleted since, stored exactly once.
	FoundOnce int `json:"foundOnce"`
	// Lost: acked, not deleted since, not stored.
	Lost []string `json:"lost"`
	// Duplicated: one create stored more than once.
	Duplicated []string `json:"duplicated"`
	// Unacked creates that may have happened: stored 0 or 1 times is right.
	UnackedStored    int `json:"unackedStored"`
	UnackedAbsent    int `json:"unackedAbsent"`
	DeletesAcked     int `json:"deletesAcked"`
	DeletesUncertain int `json:"deletesUncertain"`
	// InDeletedNamespaces: acked creates whose namespace was deleted
	// (CheckNamespaces judges those).
	InDeletedNamespaces int `json:"inDeletedNamespaces"`
	// StillPresent: an acked delete's object is stored.
	StillPresent []string `json:"stillPresent"`
}

// CheckWrites compares the creates with the final quorum lists (by kind).
func CheckWrites(creates []*CreateRecord, lists map[string][]unstructured.Unstructured) WriteCheck {
	stored := map[string]int{}
	for kind, items := range lists {
		for _, it := range items {
			stored[kind+"/"+it.GetLabels()[OpLabel]]++
		}
	}
	wc := WriteCheck{Creates: len(creates), Lost: []string{}, Duplicated: []string{}, StillPresent: []string{}}
	for _, r := range creates {
		key := fmt.Sprintf("%s/%d", r.Kind, r.Op)
		n := stored[key]
		if n > 1 {
			wc.Duplicated = append(wc.Duplicated, fmt.Sprintf("%s ×%d", key, n))
		}
		switch {
		case !r.Acked && n > 0:
			wc.UnackedStored++
		case !r.Acked:
			wc.UnackedAbsent++
		case r.DeleteAcked:
			wc.Acked++
			wc.DeletesAcked++
			if n > 0 {
				wc.StillPresent = append(wc.StillPresent, key+" "+r.Name)
			}
		case r.DeleteUncertain:
			wc.Acked++
			wc.DeletesUncertain++
		case r.NamespaceDeleted:
			wc.Acked++
			wc.InDeletedNamespaces++
		default:
			wc.Acked++
			if n == 0 {
				wc.Lost = append(wc.Lost, key+" "+r.Name)
			} else if n == 1 {
				wc.FoundOnce++
			}
		}
	}
	return wc
}

// OK says whether the writes held: nothing lost, nothing twice, every
// acked delete gone.
func (wc WriteCheck) OK() bool {
	return len(wc.Lost) == 0 && len(wc.Duplicated) == 0 && len(wc.StillPresent) == 0
}

func (wc WriteCheck) String() string {
	return fmt.Sprintf("%d creates (%d acked: %d stored once, %d lost, %d deleted with an ack, %d deleted uncertainly, %d in deleted namespaces; %d not acked: %d stored, %d not), %d duplicated, %d still present after an acked delete%s",
		wc.Creates, wc.Acked, wc.FoundOnce, len(wc.Lost), wc.DeletesAcked, wc.DeletesUncertain, wc.InDeletedNamespaces, wc.UnackedStored+wc.UnackedAbsent, wc.UnackedStored, wc.UnackedAbsent,
		len(wc.Duplicated), len(wc.StillPresent), listed(wc.Lost, wc.Duplicated, wc.StillPresent))
}

func listed(lists ...[]string) string {
	var all []string
	for _, l := range lists {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return ""
	}
	if len(all) > 10 {
		all = append(all[:10], "…")
	}
	return ": " + strings.Join(all, ", ")
}

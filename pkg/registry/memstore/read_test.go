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

package memstore

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

func mustGet(t *testing.T, s *Store, name string) *Widget {
	t.Helper()
	o, err := s.Get(context.Background(), name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*Widget)
}

func TestGet(t *testing.T) {
	s := newWidgetStore(t, nil)
	mustReplace(t, s, objs(wid("a", "red"), wid("b", "blue")))
	cur := s.ResourceVersion()
	tests := []struct {
		name, obj, rv string
		check         func(error) bool
	}{
		{"found", "b", "", nil},
		{"found any rv", "a", "0", nil},
		{"found not older than", "a", strconv.FormatUint(cur, 10), nil},
		{"not found", "zz", "", apierrors.IsNotFound},
		{"future rv", "a", strconv.FormatUint(cur+10, 10), storage.IsTooLargeResourceVersion},
		{"other epoch", "a", strconv.FormatUint(uint64(otherEpoch)<<32|1, 10), apierrors.IsResourceExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := s.Get(context.Background(), tt.obj, &metav1.GetOptions{ResourceVersion: tt.rv})
			if tt.check == nil {
				if err != nil || o.(*Widget).Name != tt.obj {
					t.Fatalf("got %v, %v", o, err)
				}
				return
			}
			if !tt.check(err) {
				t.Fatalf("unexpected error %v", err)
			}
		})
	}
	_, err := s.Get(context.Background(), "zz", nil)
	if st := err.(apierrors.APIStatus).Status(); st.Details.Name != "zz" || st.Details.Group != widgetResource.Group || st.Details.Kind != "widgets" {
		t.Fatalf("NotFound details %+v", st.Details)
	}
}

func TestListSelectors(t *testing.T) {
	s := newWidgetStore(t, nil)
	mustReplace(t, s, objs(wid("a", "red", "tier", "fe"), wid("b", "blue", "tier", "be"), wid("c", "red", "tier", "be"), wid("d", "green")))
	tests := []struct {
		name   string
		labels string
		fields string
		want   string
	}{
		{"everything", "", "", "map[a:red b:blue c:red d:green]"},
		{"label equality", "tier=be", "", "map[b:blue c:red]"},
		{"label exists", "tier", "", "map[a:red b:blue c:red]"},
		{"label not exists", "!tier", "", "map[d:green]"},
		{"label set", "tier in (fe)", "", "map[a:red]"},
		{"field name", "", "metadata.name=c", "map[c:red]"},
		{"field custom", "", "spec.color=red", "map[a:red c:red]"},
		{"field not equal", "", "spec.color!=red", "map[b:blue d:green]"},
		{"both", "tier=be", "spec.color=red", "map[c:red]"},
		{"none", "tier=zz", "", "map[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := &metainternalversion.ListOptions{}
			if tt.labels != "" {
				opts.LabelSelector = mustLabels(t, tt.labels)
			}
			if tt.fields != "" {
				opts.FieldSelector = fields.ParseSelectorOrDie(tt.fields)
			}
			if got := fmt.Sprint(state(listWidgets(t, s, opts))); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
	// Results are sorted by name.
	l := listWidgets(t, s, nil)
	for i := 1; i < len(l.Items); i++ {
		if l.Items[i-1].Name >= l.Items[i].Name {
			t.Fatalf("not sorted: %s before %s", l.Items[i-1].Name, l.Items[i].Name)
		}
	}
}

func mustLabels(t testing.TB, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func TestListResourceVersion(t *testing.T) {
	s := newWidgetStore(t, func(c *Config) { c.HistorySize = 2 })
	mustReplace(t, s, objs(wid("a", "red")))
	rvA := s.ResourceVersion()
	mustReplace(t, s, objs(wid("a", "red"), wid("b", "blue")))
	rvAB := s.ResourceVersion()
	mustReplace(t, s, objs(wid("a", "green"), wid("b", "blue")))
	rvMod := s.ResourceVersion()
	mustReplace(t, s, objs(wid("b", "blue")))
	cur := s.ResourceVersion()
	f := func(v uint64) string { return strconv.FormatUint(v, 10) }
	foreign := f(uint64(otherEpoch)<<32 | 3)

	isTooLarge := func(err error) bool {
		// What the client sees: 504 Timeout with cause ResourceVersionTooLarge.
		st, ok := err.(apierrors.APIStatus)
		return ok && storage.IsTooLargeResourceVersion(err) && st.Status().Code == http.StatusGatewayTimeout &&
			st.Status().Reason == metav1.StatusReasonTimeout &&
			apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
	}
	isGone := func(err error) bool {
		st, ok := err.(apierrors.APIStatus)
		return ok && apierrors.IsResourceExpired(err) && st.Status().Code == http.StatusGone
	}
	tests := []struct {
		name     string
		opts     metainternalversion.ListOptions
		want     string // state
		wantRV   uint64
		checkErr func(error) bool
	}{
		{name: "most recent", opts: metainternalversion.ListOptions{}, want: "map[b:blue]", wantRV: cur},
		{name: "any", opts: metainternalversion.ListOptions{ResourceVersion: "0"}, want: "map[b:blue]", wantRV: cur},
		{name: "legacy not older than past", opts: metainternalversion.ListOptions{ResourceVersion: f(rvA)}, want: "map[b:blue]", wantRV: cur},
		{name: "not older than current", opts: metainternalversion.ListOptions{ResourceVersion: f(cur), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, want: "map[b:blue]", wantRV: cur},
		{name: "not older than future", opts: metainternalversion.ListOptions{ResourceVersion: f(cur + 1), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, checkErr: isTooLarge},
		{name: "legacy future", opts: metainternalversion.ListOptions{ResourceVersion: f(cur + 100)}, checkErr: isTooLarge},
		{name: "not older than other epoch", opts: metainternalversion.ListOptions{ResourceVersion: foreign, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, checkErr: isGone},
		{name: "legacy other epoch", opts: metainternalversion.ListOptions{ResourceVersion: foreign}, checkErr: isGone},
		{name: "epoch zero (etcd-like) rv", opts: metainternalversion.ListOptions{ResourceVersion: "12345"}, checkErr: isGone},
		{name: "unparsable", opts: metainternalversion.ListOptions{ResourceVersion: "abc", ResourceVersionMatch: metav1.ResourceVersionMatchExact}, checkErr: isGone},
		{name: "exact other epoch", opts: metainternalversion.ListOptions{ResourceVersion: foreign, ResourceVersionMatch: metav1.ResourceVersionMatchExact}, checkErr: isGone},
		{name: "exact future", opts: metainternalversion.ListOptions{ResourceVersion: f(cur + 1), ResourceVersionMatch: metav1.ResourceVersionMatchExact}, checkErr: isTooLarge},
		{name: "exact current", opts: metainternalversion.ListOptions{ResourceVersion: f(cur), ResourceVersionMatch: metav1.ResourceVersionMatchExact}, want: "map[b:blue]", wantRV: cur},
		{name: "exact past rebuilt", opts: metainternalversion.ListOptions{ResourceVersion: f(rvMod), ResourceVersionMatch: metav1.ResourceVersionMatchExact}, want: "map[a:green b:blue]", wantRV: rvMod},
		{name: "exact past rebuilt 2", opts: metainternalversion.ListOptions{ResourceVersion: f(rvAB), ResourceVersionMatch: metav1.ResourceVersionMatchExact}, want: "map[a:red b:blue]", wantRV: rvAB},
		{name: "exact past compacted", opts: metainternalversion.ListOptions{ResourceVersion: f(rvA), ResourceVersionMatch: metav1.ResourceVersionMatchExact}, checkErr: isGone},
		{name: "continue token", opts: metainternalversion.ListOptions{Limit: 1, Continue: "abc"}, checkErr: isGone},
		{name: "limit ignored", opts: metainternalversion.ListOptions{Limit: 1}, want: "map[b:blue]", wantRV: cur},
		{name: "unknown match", opts: metainternalversion.ListOptions{ResourceVersion: "1", ResourceVersionMatch: "Sometime"}, checkErr: apierrors.IsBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := s.List(context.Background(), &tt.opts)
			if tt.checkErr != nil {
				if err == nil || !tt.checkErr(err) {
					t.Fatalf("got error %#v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			l := out.(*WidgetList)
			if got := fmt.Sprint(state(l)); got != tt.want {
				t.Fatalf("state %s, want %s", got, tt.want)
			}
			if got := listRV(t, l); got != tt.wantRV {
				t.Fatalf("list RV %d, want %d", got, tt.wantRV)
			}
			if l.Continue != "" {
				t.Fatal("continue token returned")
			}
		})
	}
}

func TestListExactMatchesHistory(t *testing.T) {
	s := newWidgetStore(t, nil)
	snapshots := map[uint64]string{}
	sets := [][]*Widget{
		{wid("a", "red")},
		{wid("a", "red"), wid("b", "blue")},
		{wid("a", "blue"), wid("b", "blue"), wid("c", "red")},
		{wid("c", "red")},
		{wid("a", "green"), wid("c", "blue")},
		{},
		{wid("b", "red")},
	}
	for _, set := range sets {
		mustReplace(t, s, objs(set...))
		l := listWidgets(t, s, nil)
		snapshots[listRV(t, l)] = fmt.Sprint(state(l))
	}
	for rv, want := range snapshots {
		l := listWidgets(t, s, &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(rv, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if got := fmt.Sprint(state(l)); got != want {
			t.Errorf("exact %d: %s, want %s", rv, got, want)
		}
	}
}

func TestShardSelector(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ShardedListAndWatch, true)
	s := newWidgetStore(t, nil)
	var all []*Widget
	for i := 0; i < 40; i++ {
		all = append(all, wid(fmt.Sprintf("w%02d", i), "red"))
	}
	mustReplace(t, s, objs(all...))
	lo := listWidgets(t, s, &metainternalversion.ListOptions{ShardSelector: "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"})
	hi := listWidgets(t, s, &metainternalversion.ListOptions{ShardSelector: "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"})
	if len(lo.Items) == 0 || len(hi.Items) == 0 || len(lo.Items)+len(hi.Items) != len(all) {
		t.Fatalf("shards %d + %d, want a split of %d", len(lo.Items), len(hi.Items), len(all))
	}
	if _, err := s.List(context.Background(), &metainternalversion.ListOptions{ShardSelector: "nonsense("}); !apierrors.IsBadRequest(err) {
		t.Fatalf("bad shard selector: %v", err)
	}
}

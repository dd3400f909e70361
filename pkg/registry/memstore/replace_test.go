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
	"regexp"
	"strings"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

func TestReplaceEvents(t *testing.T) {
	s := newWidgetStore(t, nil)
	w := startWatch(t, s, &metainternalversion.ListOptions{SendInitialEvents: ptr(false)})

	steps := []struct {
		name string
		set  []*Widget
		want []ev
	}{
		{"add two", []*Widget{wid("a", "red"), wid("b", "blue")},
			[]ev{{watch.Added, "a", "red"}, {watch.Added, "b", "blue"}}},
		{"modify one, add one", []*Widget{wid("a", "red"), wid("b", "green"), wid("c", "red")},
			[]ev{{watch.Modified, "b", "green"}, {watch.Added, "c", "red"}}},
		{"delete one", []*Widget{wid("b", "green"), wid("c", "red")},
			[]ev{{watch.Deleted, "a", "red"}}},
		{"unchanged", []*Widget{wid("c", "red"), wid("b", "green")}, nil},
		{"label change is a change", []*Widget{wid("b", "green", "tier", "x"), wid("c", "red")},
			[]ev{{watch.Modified, "b", "green"}}},
		{"delete all", nil,
			[]ev{{watch.Deleted, "b", "green"}, {watch.Deleted, "c", "red"}}},
	}
	lastRV := s.ResourceVersion()
	objRV := map[string]uint64{}
	for _, step := range steps {
		mustReplace(t, s, objs(step.set...))
		if len(step.want) == 0 {
			if got := s.ResourceVersion(); got != lastRV {
				t.Fatalf("%s: RV bumped %d → %d without a change", step.name, lastRV, got)
			}
			continue // the next step's events prove nothing was emitted here
		}
		for _, e := range expectEvents(t, w, step.want...) {
			rv := rvOf(t, e.Object)
			if rv <= lastRV {
				t.Fatalf("%s: event RV %d not above %d", step.name, rv, lastRV)
			}
			name := e.Object.(*Widget).Name
			if e.Type == watch.Deleted && rv <= objRV[name] {
				t.Fatalf("%s: DELETED %s carries RV %d, not newer than its last %d", step.name, name, rv, objRV[name])
			}
			objRV[name] = rv
			lastRV = rv
		}
		if got := s.ResourceVersion(); got != lastRV {
			t.Fatalf("%s: store RV %d, want last event RV %d", step.name, got, lastRV)
		}
	}
	if n := len(listWidgets(t, s, nil).Items); n != 0 {
		t.Fatalf("%d items left", n)
	}
}

func TestReplaceIgnoresStoreOwnedMetadata(t *testing.T) {
	s := newWidgetStore(t, nil)
	now := time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)
	s.now = func() time.Time { return now }
	mustReplace(t, s, objs(wid("a", "red", "k", "v")))
	before, err := s.Get(context.Background(), "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	b := before.(*Widget)
	if b.UID != UID(widgetResource, "a") || b.Generation != 1 || !b.CreationTimestamp.Time.Equal(now.Truncate(time.Second)) || b.ResourceVersion == "" {
		t.Fatalf("metadata not set on add: %+v", b.ObjectMeta)
	}
	rv := s.ResourceVersion()

	// The caller's values for store-owned fields are ignored.
	x := wid("a", "red", "k", "v")
	x.ResourceVersion = "42"
	x.UID = "caller-uid"
	x.Generation = 9
	x.CreationTimestamp = metav1.NewTime(time.Unix(1000, 0))
	x.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
	mustReplace(t, s, objs(x))
	if got := s.ResourceVersion(); got != rv {
		t.Fatalf("RV bumped %d → %d for a metadata-only difference", rv, got)
	}
	same, _ := s.Get(context.Background(), "a", nil)
	if fmt.Sprint(same) != fmt.Sprint(before) {
		t.Fatalf("object changed:\n%v\n%v", same, before)
	}

	// A real change keeps uid and creationTimestamp, bumps generation.
	now = now.Add(time.Hour) // so a reset creationTimestamp would differ
	mustReplace(t, s, objs(wid("a", "blue", "k", "v")))
	after, _ := s.Get(context.Background(), "a", nil)
	a := after.(*Widget)
	if a.UID != b.UID || !a.CreationTimestamp.Equal(&b.CreationTimestamp) || a.Generation != 2 || a.ManagedFields != nil {
		t.Fatalf("after change: uid %s→%s created %v→%v generation %d managedFields %v",
			b.UID, a.UID, b.CreationTimestamp, a.CreationTimestamp, a.Generation, a.ManagedFields)
	}
	if rvOf(t, a) <= rv {
		t.Fatal("changed object kept its RV")
	}

	// Deleted then re-added: same (deterministic) uid, new creationTimestamp.
	mustReplace(t, s, nil)
	mustReplace(t, s, objs(wid("a", "blue")))
	again, _ := s.Get(context.Background(), "a", nil)
	g := again.(*Widget)
	if g.UID != b.UID || g.Generation != 1 || g.CreationTimestamp.Equal(&b.CreationTimestamp) {
		t.Fatalf("re-added: uid %s generation %d created %v", g.UID, g.Generation, g.CreationTimestamp)
	}
}

// Bad input fails the whole Replace with an error that says what is
// wrong, and the store keeps its content.
func TestReplaceRejectsBadInputWhole(t *testing.T) {
	s := newWidgetStore(t, nil)
	mustReplace(t, s, objs(wid("a", "red")))
	rv := s.ResourceVersion()
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{"nil", []runtime.Object{wid("b", "red"), nil}, "object 1 is nil"},
		{"no name", []runtime.Object{wid("b", "red"), wid("", "red")}, "object 1 has no name"},
		{"no metadata", []runtime.Object{&metav1.Status{}}, "object 0"},
		{"duplicate", []runtime.Object{wid("b", "red"), wid("b", "blue")}, `name "b" given twice`},
	} {
		err := s.Replace(tc.objs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if got := state(listWidgets(t, s, nil)); fmt.Sprint(got) != "map[a:red]" || s.ResourceVersion() != rv {
		t.Fatalf("after rejected Replaces: state %v at %d, want map[a:red] at %d", got, s.ResourceVersion(), rv)
	}
}

func TestUIDDeterministic(t *testing.T) {
	uuidV5 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	other := schema.GroupResource{Group: widgetResource.Group, Resource: "gadgets"}
	tests := []struct {
		name   string
		a, b   types.UID
		wantEq bool
	}{
		{"same resource and name", UID(widgetResource, "x"), UID(widgetResource, "x"), true},
		{"other name", UID(widgetResource, "x"), UID(widgetResource, "y"), false},
		{"other resource", UID(widgetResource, "x"), UID(other, "x"), false},
		{"other group", UID(widgetResource, "x"), UID(schema.GroupResource{Group: "other.k8s.io", Resource: "widgets"}, "x"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !uuidV5.MatchString(string(tt.a)) {
				t.Fatalf("%q is not a version 5 UUID", tt.a)
			}
			if (tt.a == tt.b) != tt.wantEq {
				t.Fatalf("%q vs %q: equal=%v, want %v", tt.a, tt.b, tt.a == tt.b, tt.wantEq)
			}
		})
	}

	// The values themselves are pinned: replicas of two builds (a rollout)
	// must agree, so a change of namespace or of the name's form is a
	// compatibility break, not a refactoring.
	pinned := []struct {
		resource schema.GroupResource
		name     string
		want     types.UID
	}{
		{schema.GroupResource{Group: "peerdiscovery.k8s.io", Resource: "peerroutingtables"}, "widgets.v1.example.com", "71e40928-f1b7-54c5-af6e-e47458220b67"},
		{schema.GroupResource{Group: "peerdiscovery.k8s.io", Resource: "apiserverpeers"}, "kube-apiserver-a", "c7382658-5663-5788-b88c-2a8550373520"},
	}
	for _, p := range pinned {
		if got := UID(p.resource, p.name); got != p.want {
			t.Errorf("UID(%s, %q) = %s, want %s (the value an earlier build gives)", p.resource, p.name, got, p.want)
		}
	}

	// Two replicas (different epochs) agree on uids and differ on RVs.
	r1 := newWidgetStore(t, nil)
	r2 := newWidgetStore(t, func(c *Config) { c.Epoch = otherEpoch })
	for _, r := range []*Store{r1, r2} {
		mustReplace(t, r, objs(wid("a", "red")))
	}
	o1, _ := r1.Get(context.Background(), "a", nil)
	o2, _ := r2.Get(context.Background(), "a", nil)
	if o1.(*Widget).UID != o2.(*Widget).UID {
		t.Fatal("replicas disagree on uid")
	}
	if o1.(*Widget).ResourceVersion == o2.(*Widget).ResourceVersion {
		t.Fatal("replicas share an RV")
	}
}

func TestCallersNeverShareMemory(t *testing.T) {
	s := newWidgetStore(t, nil)
	in := wid("a", "red", "k", "v")
	mustReplace(t, s, objs(in))
	w := startWatch(t, s, nil) // synthetic ADDED copy
	in.Spec.Tags[0] = "mutated-input"
	in.Labels["k"] = "mutated-input"

	g, _ := s.Get(context.Background(), "a", nil)
	g.(*Widget).Spec.Tags[0] = "mutated-get"
	g.(*Widget).Labels["k"] = "mutated-get"

	l := listWidgets(t, s, nil)
	l.Items[0].Spec.Tags[0] = "mutated-list"
	l.Items[0].Labels["k"] = "mutated-list"

	e := next(t, w)
	e.Object.(*Widget).Spec.Tags[0] = "mutated-watch"

	for _, got := range []*Widget{mustGet(t, s, "a"), &listWidgets(t, s, nil).Items[0], next(t, startWatch(t, s, nil)).Object.(*Widget)} {
		if got.Spec.Tags[0] != "t-a" || got.Labels["k"] != "v" {
			t.Fatalf("store content was mutated through a caller: tags %v labels %v", got.Spec.Tags, got.Labels)
		}
	}
}

package memstore

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

func TestTestTypesAreRuntimeObjects(t *testing.T) {
	s := newTestScheme()
	for _, o := range []runtime.Object{&Widget{}, &WidgetList{}, &RouteTable{}, &RouteTableList{}} {
		if _, _, err := s.ObjectKinds(o); err != nil {
			t.Errorf("%T: %v", o, err)
		}
	}
}

func TestClock(t *testing.T) {
	for i := 0; i < 50; i++ {
		c := NewClock()
		if e := c.Epoch(); e == 0 || e > epochMask {
			t.Fatalf("epoch %d outside 1..2^30-1", e)
		}
		if c.Current() == 0 || !c.owns(c.Current()) {
			t.Fatalf("initial Current %d must be non-zero and owned", c.Current())
		}
	}
	c := newClockWithEpoch(testEpoch)
	prev := c.Current()
	for i := 0; i < 100; i++ {
		c.mu.Lock()
		rv := c.nextLocked()
		c.mu.Unlock()
		if rv <= prev || rv != c.Current() || !c.owns(rv) || rv>>62 != 0 {
			t.Fatalf("rv %d after %d: not monotonic/owned/below 2^62", rv, prev)
		}
		prev = rv
	}
	if c.owns(uint64(otherEpoch)<<32|5) || c.owns(5) {
		t.Fatal("foreign RVs reported as owned")
	}
}

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
		s.Replace(objs(step.set...))
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
	s.Replace(objs(wid("a", "red", "k", "v")))
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
	s.Replace(objs(x))
	if got := s.ResourceVersion(); got != rv {
		t.Fatalf("RV bumped %d → %d for a metadata-only difference", rv, got)
	}
	same, _ := s.Get(context.Background(), "a", nil)
	if fmt.Sprint(same) != fmt.Sprint(before) {
		t.Fatalf("object changed:\n%v\n%v", same, before)
	}

	// A real change keeps uid and creationTimestamp, bumps generation.
	now = now.Add(time.Hour) // so a reset creationTimestamp would differ
	s.Replace(objs(wid("a", "blue", "k", "v")))
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
	s.Replace(nil)
	s.Replace(objs(wid("a", "blue")))
	again, _ := s.Get(context.Background(), "a", nil)
	g := again.(*Widget)
	if g.UID != b.UID || g.Generation != 1 || g.CreationTimestamp.Equal(&b.CreationTimestamp) {
		t.Fatalf("re-added: uid %s generation %d created %v", g.UID, g.Generation, g.CreationTimestamp)
	}
}

func TestReplaceSkipsInvalidAndLastDuplicateWins(t *testing.T) {
	s := newWidgetStore(t, nil)
	s.Replace([]runtime.Object{nil, wid("", "red"), wid("a", "red"), wid("a", "blue"), &metav1.Status{}})
	if got := state(listWidgets(t, s, nil)); fmt.Sprint(got) != "map[a:blue]" {
		t.Fatalf("state %v", got)
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

	// Two replicas (different epochs) agree on uids and differ on RVs.
	r1 := newWidgetStore(t, nil)
	r2 := newWidgetStore(t, func(c *Config) { c.Clock = newClockWithEpoch(otherEpoch) })
	for _, r := range []*Store{r1, r2} {
		r.Replace(objs(wid("a", "red")))
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
	s.Replace(objs(in))
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
	s.Replace(objs(wid("a", "red"), wid("b", "blue")))
	cur := s.clock.Current()
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
	s.Replace(objs(wid("a", "red", "tier", "fe"), wid("b", "blue", "tier", "be"), wid("c", "red", "tier", "be"), wid("d", "green")))
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
	s.Replace(objs(wid("a", "red")))
	rvA := s.ResourceVersion()
	s.Replace(objs(wid("a", "red"), wid("b", "blue")))
	rvAB := s.ResourceVersion()
	s.Replace(objs(wid("a", "green"), wid("b", "blue")))
	rvMod := s.ResourceVersion()
	s.Replace(objs(wid("b", "blue")))
	cur := s.clock.Current()
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
		s.Replace(objs(set...))
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

func TestSharedClockAcrossStores(t *testing.T) {
	clock := newClockWithEpoch(testEpoch)
	a := newWidgetStore(t, func(c *Config) { c.Clock = clock })
	b := newWidgetStore(t, func(c *Config) { c.Clock = clock })
	a.Replace(objs(wid("x", "red")))
	la := listWidgets(t, a, nil)
	b.Replace(objs(wid("y", "red")))
	if b.ResourceVersion() <= a.ResourceVersion() {
		t.Fatal("RVs not monotonic across stores of one clock")
	}
	lb := listWidgets(t, a, nil)
	if listRV(t, lb) <= listRV(t, la) {
		t.Fatal("list RV did not follow the shared clock")
	}
	a.Replace(objs(wid("x", "blue")))
	// Watching a from either list RV sees exactly a's one later change.
	for _, l := range []*WidgetList{la, lb} {
		w := startWatch(t, a, &metainternalversion.ListOptions{ResourceVersion: l.ResourceVersion})
		expectEvents(t, w, ev{watch.Modified, "x", "blue"})
	}
}

func TestShardSelector(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ShardedListAndWatch, true)
	s := newWidgetStore(t, nil)
	var all []*Widget
	for i := 0; i < 40; i++ {
		all = append(all, wid(fmt.Sprintf("w%02d", i), "red"))
	}
	s.Replace(objs(all...))
	lo := listWidgets(t, s, &metainternalversion.ListOptions{ShardSelector: "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"})
	hi := listWidgets(t, s, &metainternalversion.ListOptions{ShardSelector: "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"})
	if len(lo.Items) == 0 || len(hi.Items) == 0 || len(lo.Items)+len(hi.Items) != len(all) {
		t.Fatalf("shards %d + %d, want a split of %d", len(lo.Items), len(hi.Items), len(all))
	}
	if _, err := s.List(context.Background(), &metainternalversion.ListOptions{ShardSelector: "nonsense("}); !apierrors.IsBadRequest(err) {
		t.Fatalf("bad shard selector: %v", err)
	}
}

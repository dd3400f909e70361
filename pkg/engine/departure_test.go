package engine

import (
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
	registry "sigs.k8s.io/peerdiscovery/pkg/registry/peerdiscovery"
)

// docA is what a serves: a group and a cluster-scoped resource only it
// serves, and apps/v1 that b serves too (a's ID sorts first, so its scope
// is the shared routes' scope).
func docA() Document {
	cluster := grp("cluster-only.example.com", ver("v1"))
	cluster.Versions[0].Resources = []apidiscoveryv2.APIResourceDiscovery{{Resource: "globals", Scope: apidiscoveryv2.ScopeCluster, Verbs: []string{"get"}}}
	return document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("only-a.example.com", ver("v1", "things")), cluster)
}

func docB() Document { return document("v1.36.3", grp("apps", ver("v1", "deployments"))) }

// departed is a's registration lease as its filter leaves it on a graceful
// shutdown: renewed at renewed, departed at at, with what doc lists.
func departed(t *testing.T, id, endpoint string, renewed, at time.Time, doc Document) *coordinationv1.Lease {
	t.Helper()
	enc, err := peerlease.EncodeServed(peerlease.ServedFromDiscovery(doc.API, doc.APIs))
	if err != nil {
		t.Fatal(err)
	}
	return peerlease.MarkDeparted(regLease(id, endpoint, doc.Version, renewed), at, enc)
}

func leftAt(v registry.View, id string) time.Time {
	p := peerOf(v, id)
	if p == nil || p.Status.LeftTime == nil {
		return time.Time{}
	}
	return p.Status.LeftTime.Time
}

// A replica started after a kube-apiserver departed publishes the same
// routing tables, and the same APIServerPeer for it, as a replica that
// read the server before it left; neither reads a departed server.
func TestEngineDepartedLeaseSameViewOnEveryReplica(t *testing.T) {
	departure := t0.Add(30 * time.Second)

	// The replica that knew a.
	h1 := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), regLease(idB, epB, "v1.36.3", t0)}})
	h1.scraper.set(epA, serve(docA()))
	h1.scraper.set(epB, serve(docB()))
	h1.start()
	h1.pub.waitFor(t, "both ready", func(v registry.View) bool { return isReady(v, idA) && isReady(v, idB) })
	// It notices the departure a minute after a recorded it.
	h1.clk.Step(time.Minute)
	h1.waitCalls(epB, 2)
	h1.waitCalls(epA, 2)
	if _, err := h1.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), departed(t, idA, epA, t0, departure, docA()), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v1 := h1.pub.waitFor(t, "a left", func(v registry.View) bool { return leftAt(v, idA).Equal(departure) })
	callsA := len(h1.scraper.callsTo(epA))
	h1.refresh(epB)
	v1 = h1.pub.waitFor(t, "b re-read", func(v registry.View) bool {
		return peerOf(v, idB).Status.LastSyncTime.Time.Equal(h1.clk.Now())
	})
	if n := len(h1.scraper.callsTo(epA)); n != callsA {
		t.Errorf("a departed peer was read again (%d reads)", n-callsA)
	}

	// A replica started after the departure, at the same time.
	h2 := newHarness(t, testOptions(), seed{kube: []runtime.Object{departed(t, idA, epA, t0, departure, docA()), regLease(idB, epB, "v1.36.3", t0)}})
	h2.clk.SetTime(h1.clk.Now())
	h2.scraper.set(epA, serve(docA()))
	h2.scraper.set(epB, serve(docB()))
	h2.start()
	v2 := h2.pub.waitFor(t, "b ready, a known", func(v registry.View) bool { return isReady(v, idB) && peerOf(v, idA) != nil })
	if calls := h2.scraper.callsTo(epA); len(calls) != 0 {
		t.Errorf("the new replica read a departed peer %d times", len(calls))
	}

	if !reflect.DeepEqual(v1.Routes, v2.Routes) {
		t.Errorf("routing tables differ:\nreplica that read a:\n%s\nreplica started later:\n%s", describe(v1), describe(v2))
	}
	// The status may differ in what the document says (the replica that
	// read a keeps its full document for discovery: counts, ETags); the
	// identity, readiness and left time may not. Only the leader publishes,
	// so replicas serve one of the two, whichever leads.
	if pa1, pa2 := peerOf(v1, idA), peerOf(v2, idA); !reflect.DeepEqual(pa1.Spec, pa2.Spec) ||
		!reflect.DeepEqual(pa1.Status.Conditions, pa2.Status.Conditions) || !reflect.DeepEqual(pa1.Status.LeftTime, pa2.Status.LeftTime) {
		t.Errorf("a's APIServerPeer differs:\n%+v\n%+v", pa1, pa2)
	}
	// And the tombstone is what a served.
	for _, name := range []string{"things.v1.only-a.example.com", "globals.v1.cluster-only.example.com"} {
		rt := routeOf(v2, name)
		if rt == nil || len(rt.Status.Peers) != 1 || !rt.Status.Peers[0].Left || rt.Status.Peers[0].Endpoint != epA || rt.Status.ReadyPeers != 0 {
			t.Errorf("%s: %+v", name, rt)
		}
	}
	if rt := routeOf(v2, "globals.v1.cluster-only.example.com"); rt != nil && rt.Spec.Scope != apidiscoveryv2.ScopeCluster {
		t.Errorf("globals scope %q", rt.Spec.Scope)
	}
	if rt := routeOf(v2, "deployments.v1.apps"); rt == nil || len(rt.Status.Peers) != 2 || !rt.Status.Peers[0].Left || !rt.Status.ServedByAll {
		t.Errorf("deployments: %+v", rt)
	}
	// Listed (stale) while the tombstone lasts, on both replicas.
	if !hasGroupVersion(v1, "only-a.example.com", "v1") || !hasGroupVersion(v2, "only-a.example.com", "v1") {
		t.Error("a departed peer's APIs left the merged discovery during its tombstone")
	}
	// Only the replica that saw a go says so.
	if got := h2.eventsFor(idA); len(got) != 0 {
		t.Errorf("the new replica recorded events for a: %v", got)
	}
	if got := h1.eventsFor(idA); !slices.Equal(got, []string{"Normal " + ReasonJoined, "Normal " + ReasonReady, "Warning " + ReasonLeft}) {
		t.Errorf("events of a on the first replica: %v", got)
	}
}

// The tombstone runs from the time the Lease gives, not from when a
// replica noticed.
func TestEngineTombstoneFromLeaseTimes(t *testing.T) {
	t.Run("departed, noticed late", func(t *testing.T) {
		h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), regLease(idB, epB, "v1.36.3", t0)}})
		h.scraper.set(epA, serve(docA()))
		h.scraper.set(epB, serve(docB()))
		h.start()
		h.pub.waitFor(t, "both ready", func(v registry.View) bool { return isReady(v, idA) && isReady(v, idB) })
		h.clk.Step(2 * time.Minute)
		departure := t0.Add(30 * time.Second)
		if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), departed(t, idA, epA, t0, departure, docA()), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.pub.waitFor(t, "a left at its departure", func(v registry.View) bool { return leftAt(v, idA).Equal(departure) })

		end := departure.Add(h.opts.TombstonePeriod)
		h.clk.SetTime(end.Add(-time.Second))
		v := h.pub.waitFor(t, "b re-read just before a's tombstone ends", func(v registry.View) bool {
			return peerOf(v, idB).Status.LastSyncTime.Time.Equal(h.clk.Now())
		})
		if peerOf(v, idA) == nil || routeOf(v, "things.v1.only-a.example.com") == nil {
			t.Fatal("the tombstone ended early")
		}
		h.clk.Step(time.Second)
		h.eng.poke() // a second is no refresh tick
		v = h.pub.waitFor(t, "a removed", func(v registry.View) bool { return peerOf(v, idA) == nil })
		if routeOf(v, "things.v1.only-a.example.com") != nil {
			t.Error("a's route outlives its tombstone")
		}
		want := []string{"Normal " + ReasonJoined, "Normal " + ReasonReady, "Warning " + ReasonLeft, "Normal " + ReasonRemoved}
		if got := h.eventsFor(idA); !slices.Equal(got, want) {
			t.Errorf("events: %v, want %v", got, want)
		}
	})

	t.Run("lapsed before the replica started", func(t *testing.T) {
		renewed := t0.Add(-2 * time.Minute)
		lapsed := peerlease.NewRegistrationLease(nil, idA, epA, "v1.37.2", renewed) // 10s, never renewed
		h := newHarness(t, testOptions(), seed{kube: []runtime.Object{lapsed, regLease(idB, epB, "v1.36.3", t0)}})
		h.scraper.set(epA, serve(docA()))
		h.scraper.set(epB, serve(docB()))
		h.start()
		gone := renewed.Add(peerlease.DefaultDurationSeconds * time.Second)
		v := h.pub.waitFor(t, "b ready, a tombstoned", func(v registry.View) bool { return isReady(v, idB) && peerOf(v, idA) != nil })
		p := peerOf(v, idA)
		if !leftAt(v, idA).Equal(gone) || readyCond(p).Status != metav1.ConditionFalse || readyCond(p).Reason != "Left" ||
			!readyCond(p).LastTransitionTime.Time.Equal(gone) || p.Spec.Endpoint != epA {
			t.Errorf("a: %+v %+v", p.Spec, p.Status)
		}
		if calls := h.scraper.callsTo(epA); len(calls) != 0 {
			t.Errorf("a lapsed peer was read %d times", len(calls))
		}
		h.clk.SetTime(gone.Add(h.opts.TombstonePeriod - time.Second))
		v = h.pub.waitFor(t, "b re-read just before a's tombstone ends", func(v registry.View) bool {
			return peerOf(v, idB).Status.LastSyncTime.Time.Equal(h.clk.Now())
		})
		if peerOf(v, idA) == nil {
			t.Fatal("the tombstone ended early")
		}
		h.clk.Step(time.Second)
		h.eng.poke() // a second is no refresh tick
		h.pub.waitFor(t, "a removed", func(v registry.View) bool { return peerOf(v, idA) == nil })
		// Its leaving was before this replica; the tombstone's end is news.
		if got := h.eventsFor(idA); !slices.Equal(got, []string{"Normal " + ReasonRemoved}) {
			t.Errorf("events for a peer that left before the replica started: %v", got)
		}
	})
}

// A new identity at an endpoint retires the older one there at once: no
// tombstone, no route naming it, one Event.
func TestEngineSameEndpointNewIdentity(t *testing.T) {
	const idC = "kube-apiserver-c"
	docC := document("v1.37.2", grp("apps", ver("v1", "deployments")))
	notNamed := func(v registry.View, id string) bool {
		if peerOf(v, id) != nil {
			return false
		}
		for _, r := range v.Routes {
			for _, p := range r.Status.Peers {
				if p.ServerID == id {
					return false
				}
			}
		}
		return true
	}

	t.Run("while running", func(t *testing.T) {
		h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), regLease(idB, epB, "v1.36.3", t0)}})
		h.scraper.set(epA, serve(docA()))
		h.scraper.set(epB, serve(docB()))
		h.start()
		h.pub.waitFor(t, "both ready", func(v registry.View) bool { return isReady(v, idA) && isReady(v, idB) })
		from := h.pub.count()

		// a restarts under a new ID before its old Lease lapsed.
		h.clk.Step(time.Second)
		h.scraper.set(epA, serve(docC))
		if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Create(ctx(), regLease(idC, epA, "v1.37.2", h.clk.Now()), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		v := h.pub.waitFor(t, "c ready", func(v registry.View) bool { return isReady(v, idC) })
		if !notNamed(v, idA) || routeOf(v, "things.v1.only-a.example.com") != nil {
			t.Errorf("a is still known:\n%s", describe(v))
		}
		for i, v := range h.pub.since(from) {
			if p := peerOf(v, idA); p != nil && p.Status.LeftTime != nil {
				t.Fatalf("view %d tombstones a:\n%s", i, describe(v))
			}
			total := 0
			for _, p := range v.Peers {
				if p.Status.LeftTime == nil {
					total++
				}
			}
			if rt := routeOf(v, "deployments.v1.apps"); rt != nil && rt.Status.TotalPeers != int32(total) || total > 2 {
				t.Fatalf("view %d counts a and c both:\n%s", i, describe(v))
			}
		}
		want := []string{"Normal " + ReasonJoined, "Normal " + ReasonReady, "Normal " + ReasonReplaced}
		if got := h.eventsFor(idA); !slices.Equal(got, want) {
			t.Errorf("events of a: %v, want %v", got, want)
		}
		// Still so at the next refresh, and after a's old Lease departs.
		if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), departed(t, idA, epA, t0, t0.Add(time.Second), docA()), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.refresh(epA)
		v = h.pub.waitFor(t, "c re-read", func(v registry.View) bool { return peerOf(v, idC).Status.LastSyncTime.Time.Equal(h.clk.Now()) })
		if !notNamed(v, idA) {
			t.Errorf("a came back:\n%s", describe(v))
		}
		if got := h.eventsFor(idA); !slices.Equal(got, want) {
			t.Errorf("events of a: %v, want %v", got, want)
		}
	})

	t.Run("replica started later", func(t *testing.T) {
		old := departed(t, idA, epA, t0.Add(-time.Minute), t0.Add(-30*time.Second), docA())
		old.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour)))
		h := newHarness(t, testOptions(), seed{kube: []runtime.Object{old, regLease(idC, epA, "v1.37.2", t0), regLease(idB, epB, "v1.36.3", t0)}})
		h.scraper.set(epA, serve(docC))
		h.scraper.set(epB, serve(docB()))
		h.start()
		v := h.pub.waitFor(t, "b and c ready", func(v registry.View) bool { return isReady(v, idB) && isReady(v, idC) })
		if !notNamed(v, idA) || len(v.Peers) != 2 {
			t.Errorf("a is known:\n%s", describe(v))
		}
		if got := h.eventsFor(idA); len(got) != 0 {
			t.Errorf("events of a: %v", got)
		}
	})

	// A server renamed and renamed back: the live identity wins over the
	// departed one even though its Lease was acquired earlier, and the
	// departed one is not counted beside it.
	t.Run("live beats a newer departed identity", func(t *testing.T) {
		renamed := departed(t, idC, epA, t0.Add(-time.Minute), t0.Add(-30*time.Second), docC)
		live := regLease(idA, epA, "v1.37.2", t0)
		live.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour)))
		h := newHarness(t, testOptions(), seed{kube: []runtime.Object{renamed, live, regLease(idB, epB, "v1.36.3", t0)}})
		h.scraper.set(epA, serve(docA()))
		h.scraper.set(epB, serve(docB()))
		h.start()
		v := h.pub.waitFor(t, "a and b ready", func(v registry.View) bool { return isReady(v, idA) && isReady(v, idB) })
		if !notNamed(v, idC) || len(v.Peers) != 2 {
			t.Errorf("the departed identity at a's endpoint is still counted:\n%s", describe(v))
		}
	})

	// Which one is older comes from the Leases: acquireTime, then
	// renewTime, then the name.
	for _, tc := range []struct {
		name                  string
		acquireA, acquireC    time.Time
		renewA, renewC        time.Time
		wantKept, wantRetired string
	}{
		{"later acquireTime wins", t0.Add(-time.Minute), t0.Add(-2 * time.Minute), t0, t0, idA, idC},
		{"same acquireTime: later renewTime wins", t0, t0, t0.Add(-time.Second), t0, idC, idA},
		{"all equal: the greater name wins", t0, t0, t0, t0, idC, idA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, c := regLease(idA, epA, "", tc.renewA), regLease(idC, epA, "", tc.renewC)
			a.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(tc.acquireA))
			c.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(tc.acquireC))
			h := newHarness(t, testOptions(), seed{kube: []runtime.Object{a, c}})
			h.scraper.set(epA, serve(docC))
			h.start()
			v := h.pub.waitFor(t, tc.wantKept+" ready", func(v registry.View) bool { return isReady(v, tc.wantKept) })
			if !notNamed(v, tc.wantRetired) || len(v.Peers) != 1 {
				t.Errorf("want only %s:\n%s", tc.wantKept, describe(v))
			}
		})
	}
}

// Events name the APIServerPeer object as kubectl describe looks it up:
// kind, name, no namespace, and the UID the store gives it.
func TestEngineEventReferencesTheObject(t *testing.T) {
	kube := fake.NewClientset()
	e, err := New(testOptions(), Clients{Kube: kube}, nil, newRecordingPublisher(), newFakeScraper().Scrape, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.broadcaster.Shutdown()
	p := &peerState{Peer: compute.Peer{ServerID: epA}} // an address: the name differs from the ID
	e.event(p, corev1.EventTypeNormal, ReasonJoined, "Peer %s joined", epA)

	var ev corev1.Event
	eventually(t, "the event written", func() bool {
		list, err := kube.CoreV1().Events(metav1.NamespaceAll).List(ctx(), metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false
		}
		ev = list.Items[0]
		return true
	})
	name := compute.PeerName(epA)
	wantUID := memstore.UID(v1alpha1.Resource("apiserverpeers"), name)
	if io := ev.InvolvedObject; io.Kind != "APIServerPeer" || io.Name != name || io.Namespace != "" || io.UID != wantUID ||
		io.APIVersion != v1alpha1.SchemeGroupVersion.String() {
		t.Errorf("involvedObject = %+v, want APIServerPeer %s uid %s", io, name, wantUID)
	}

	// kubectl describe: a reference to the object it read (reference.GetReference
	// over the unstructured object), then a field selector over it.
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	obj.SetKind("APIServerPeer")
	obj.SetName(name)
	obj.SetUID(wantUID)
	ref, err := reference.GetReference(scheme.Scheme, obj)
	if err != nil {
		t.Fatal(err)
	}
	kind, uid := ref.Kind, string(ref.UID)
	sel := kube.CoreV1().Events(ref.Namespace).GetFieldSelector(&ref.Name, &ref.Namespace, &kind, &uid)
	got := fields.Set{
		"involvedObject.name": ev.InvolvedObject.Name, "involvedObject.namespace": ev.InvolvedObject.Namespace,
		"involvedObject.kind": ev.InvolvedObject.Kind, "involvedObject.uid": string(ev.InvolvedObject.UID),
	}
	if !sel.Matches(got) {
		t.Errorf("kubectl's selector %q does not match the event's %v", sel, got)
	}
}

// Only the leader emits Events: the gate suppresses them, nil lifts it.
func TestEngineEventGate(t *testing.T) {
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "", t0)}})
	h.scraper.set(epA, serve(document("v1.37.2")))
	var leader atomic.Bool
	h.eng.SetEventGate(leader.Load)
	h.start()
	h.pub.waitFor(t, "a ready", func(v registry.View) bool { return isReady(v, idA) })
	if got := h.drainEvents(); len(got) != 0 {
		t.Fatalf("a follower emitted %v", got)
	}

	leader.Store(true)
	h.scraper.set(epA, fail(ErrRefused))
	h.refresh(epA)
	h.pub.waitFor(t, "a not ready", func(v registry.View) bool { return !isReady(v, idA) })
	if got := h.eventsFor(idA); !slices.Equal(got, []string{"Warning " + ReasonNotReady}) {
		t.Errorf("the leader's events: %v", got)
	}

	leader.Store(false)
	h.scraper.set(epA, serve(document("v1.37.2")))
	h.refresh(epA)
	h.pub.waitFor(t, "a ready again", func(v registry.View) bool { return isReady(v, idA) })
	h.eng.SetEventGate(nil)
	h.scraper.set(epA, fail(ErrTLS))
	h.refresh(epA)
	h.pub.waitFor(t, "a failing with TLS", func(v registry.View) bool { return readyCond(peerOf(v, idA)).Reason == string(ErrTLS) })
	all := strings.Join(h.drainEvents(), "\n")
	if strings.Count(all, ReasonReady) != 0 || strings.Count(all, ReasonNotReady) != 2 {
		t.Errorf("events: %s\nwant the leader's NotReady and the ungated one only", all)
	}
}

// The EndpointSlice may list a departing server after its Lease says it
// left: that address is the server that left (no address peer with a
// tombstone of its own) until its tombstone ends.
func TestEngineDepartedLeaseClaimsItsAddress(t *testing.T) {
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), kubernetesSlice("kubernetes", 6443, "10.0.0.1")}})
	h.scraper.set(epA, serve(docA()))
	h.start()
	v := h.pub.waitFor(t, "a ready", func(v registry.View) bool { return isReady(v, idA) })
	if p := peerOf(v, idA); !slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice, v1alpha1.PeerSourceRegistrationLease}) {
		t.Fatalf("a's sources: %v", sources(p))
	}
	departure := t0.Add(time.Second)
	if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), departed(t, idA, epA, t0, departure, docA()), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v = h.pub.waitFor(t, "a left", func(v registry.View) bool { return leftAt(v, idA).Equal(departure) })
	calls := len(h.scraper.callsTo(epA))
	n := h.pub.count()
	h.tick() // a refresh would show (and read) an address peer
	v = h.pub.waitFor(t, "a refresh", func(v registry.View) bool { return h.pub.count() > n })
	if len(v.Peers) != 1 || peerOf(v, epA) != nil {
		t.Errorf("the departed server's address became a peer:\n%s", describe(v))
	}
	if p := peerOf(v, idA); !slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease}) {
		t.Errorf("a's sources after it left: %v", sources(p))
	}
	if n := len(h.scraper.callsTo(epA)); n != calls {
		t.Errorf("the address was read %d times after a left", n-calls)
	}

	// After the tombstone the address is a peer of its own again.
	h.clk.SetTime(departure.Add(h.opts.TombstonePeriod))
	h.pub.waitFor(t, "the address peer", func(v registry.View) bool { return peerOf(v, idA) == nil && peerOf(v, epA) != nil })
}

// Back under the same ID after a recorded departure: until its first read
// the resources its Lease listed stay routed to it as not ready (503), never
// missing (404).
func TestEngineRejoinAfterDepartureKeepsRoutes(t *testing.T) {
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{departed(t, idA, epA, t0.Add(-time.Minute), t0.Add(-30*time.Second), docA())}})
	release, started := make(chan struct{}), make(chan struct{})
	h.scraper.set(epA, gated(release, started, docA()))
	h.start()
	h.pub.waitFor(t, "a tombstoned", func(v registry.View) bool { return leftAt(v, idA).Equal(t0.Add(-30 * time.Second)) })

	// Its filter renews the Lease, which drops the departure.
	if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), regLease(idA, epA, "v1.37.2", t0), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a read again", func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	})
	v := h.pub.waitFor(t, "a back, not read yet", func(v registry.View) bool {
		p := peerOf(v, idA)
		return p != nil && p.Status.LeftTime == nil
	})
	rt := routeOf(v, "things.v1.only-a.example.com")
	if rt == nil || len(rt.Status.Peers) != 1 || rt.Status.Peers[0].Left || rt.Status.Peers[0].Ready || rt.Status.ReadyPeers != 0 {
		t.Fatalf("a's route while it is read: %+v", rt)
	}
	close(release)
	v = h.pub.waitFor(t, "a ready", func(v registry.View) bool { return isReady(v, idA) })
	if p := peerOf(v, idA); p.Status.DiscoveryETag != docA().APIsETag {
		t.Errorf("a's document after the read: %+v", p.Status)
	}
	if calls := h.scraper.callsTo(epA); len(calls) != 1 || calls[0].apiETag != "" || calls[0].apisETag != "" {
		t.Errorf("reads of a: %+v (want one, without ETags)", calls)
	}
}

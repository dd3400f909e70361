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

package engine

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/peerdiscovery/pkg/nopeer"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/reference"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/test/poll"
)

// testPeerUID stands for the store's UIDs (registry.PeerUID, tested
// against the stored objects in the registry).
func testPeerUID(name string) types.UID { return types.UID("uid-of-" + name) }

// Events name the APIServerPeer object as kubectl describe looks it up:
// kind, name, no namespace, and the UID the store gives it.
func TestEngineEventReferencesTheObject(t *testing.T) {
	kube := fake.NewClientset()
	fs := newFakeScraper()
	e, err := newEngine(Config{Options: testOptions(), Clients: Clients{Kube: kube}, Publisher: newRecordingPublisher(), Scrape: fs.Scrape, Heartbeat: fs.Heartbeat,
		PeerUID: testPeerUID})
	if err != nil {
		t.Fatal(err)
	}
	defer e.startRecording()()
	p := &peerState{Peer: compute.Peer{ServerID: epA}} // an address: the name differs from the ID
	e.event(p, corev1.EventTypeNormal, ReasonJoined, "Peer %s joined", epA)

	var ev corev1.Event
	poll.Eventually(t, "the event written", func() bool {
		list, err := kube.CoreV1().Events(metav1.NamespaceAll).List(ctx(), metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false
		}
		ev = list.Items[0]
		return true
	})
	name := compute.PeerName(epA)
	wantUID := testPeerUID(name)
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
	h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	if got := h.drainEvents(); len(got) != 0 {
		t.Fatalf("a follower emitted %v", got)
	}

	leader.Store(true)
	h.scraper.set(epA, fail(nopeer.ErrRefused))
	h.refresh(epA)
	h.pub.waitFor(t, "a not ready", func(v compute.Output) bool { return !isReady(v, idA) })
	if got := h.eventsFor(idA); !slices.Equal(got, []string{"Warning " + ReasonNotReady}) {
		t.Errorf("the leader's events: %v", got)
	}

	leader.Store(false)
	h.scraper.set(epA, serve(document("v1.37.2")))
	h.refresh(epA)
	h.pub.waitFor(t, "a ready again", func(v compute.Output) bool { return isReady(v, idA) })
	h.eng.SetEventGate(nil)
	h.scraper.set(epA, fail(nopeer.ErrTLS))
	h.refresh(epA)
	h.pub.waitFor(t, "a failing with TLS", func(v compute.Output) bool { return readyCond(peerOf(v, idA)).Reason == string(nopeer.ErrTLS) })
	all := strings.Join(h.drainEvents(), "\n")
	if strings.Count(all, ReasonReady) != 0 || strings.Count(all, ReasonNotReady) != 2 {
		t.Errorf("events: %s\nwant the leader's NotReady and the ungated one only", all)
	}
}

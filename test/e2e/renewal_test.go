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

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/pkg/nopeer"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// maxOverIdentityBytes bounds how much larger than upstream's identity
// Lease of the same server a registration Lease is, as JSON with managed
// fields (etcd stores them, and every watch event carries them): our two
// annotations and label. With the served record in it, one was 2,716
// bytes on this plane (kube-apiserver-1, before the served-record Lease).
const maxOverIdentityBytes = 256

// TestRenewalsCarryOnlyLiveness: the registration Lease every server
// renews every 5 s carries no served record (each server's record is in
// its served-record Lease, which no renewal writes) and, as stored, costs
// etcd at most twice what upstream's identity Leases cost.
func TestRenewalsCarryOnlyLiveness(t *testing.T) {
	ids := readyPlane(t)
	ctx := context.Background()
	leases := kubernetes.NewForConfigOrDie(cluster.AdminConfig(old)).CoordinationV1().Leases(peerlease.Namespace)
	identities, err := leases.List(ctx, metav1.ListOptions{LabelSelector: peerlease.IdentityLabel + "=" + peerlease.IdentityComponent})
	if err != nil || len(identities.Items) == 0 {
		t.Fatalf("upstream's identity Leases: %d, %v", len(identities.Items), err)
	}
	identity := 0
	for i := range identities.Items {
		b, _ := json.Marshal(&identities.Items[i])
		identity = max(identity, len(b))
	}
	for i, id := range ids {
		l, err := leases.Get(ctx, peerlease.LeaseName(id), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("kube-apiserver-%d's registration Lease: %v", i, err)
		}
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		if _, has := l.Annotations[peerlease.ServedResourcesAnnotation]; has || len(b) > identity+maxOverIdentityBytes {
			t.Errorf("kube-apiserver-%d's registration Lease: %d bytes as JSON (at most %d: upstream's identity Lease %d + %d), served record in it: %v", i, len(b), identity+maxOverIdentityBytes, identity, maxOverIdentityBytes, has)
		}
		s, err := leases.Get(ctx, peerlease.ServedLeaseName(id), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("kube-apiserver-%d's served-record Lease: %v", i, err)
		}
		rec, err := peerlease.ParseServedRecord(s)
		if err != nil || len(rec.Served) == 0 {
			t.Errorf("kube-apiserver-%d's served record: %d resources, %v", i, len(rec.Served), err)
		}
		sb, _ := json.Marshal(s)
		t.Logf("kube-apiserver-%d: registration Lease %d bytes as JSON (upstream's identity Lease: %d), served-record Lease %d bytes (%d resources)", i, len(b), identity, len(sb), len(rec.Served))
	}

	// A served record follows its server's discovery ETags, and a
	// server's /apis can still change just after the plane became ready
	// (an aggregated API's availability): first wait until every record
	// holds the ETags its server serves now.
	waitRecordsCurrent(t, leases, ids)

	// Over 20 s (four renewals of each server, two of each identity
	// Lease), the served records are not written, and the renewals cost
	// etcd at most twice what upstream's identity Leases do (#48's goal;
	// bytes as stored: protobuf, managed fields included).
	w, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	renewals, served, identityWrites := 0, 0, 0
	var renewalBytes, identityBytes int
	// recorded is each served-record Lease's content as last seen (the
	// watch's initial events first), to say what a write changed.
	recorded := map[string][2]string{}
	content := func(l *coordinationv1.Lease) [2]string {
		return [2]string{l.Annotations[peerlease.ServedResourcesAnnotation], l.Annotations[peerlease.DiscoveryETagsAnnotation]}
	}
	start := time.Now()
	timeout := time.After(renewalWindow)
	for done := false; !done; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			if isLease && ev.Type == watch.Added && peerlease.IsServedRecord(l) {
				recorded[l.Name] = content(l)
			}
			if !isLease || ev.Type != watch.Modified {
				continue // the initial events (ADDED)
			}
			switch {
			case peerlease.IsRegistration(l):
				renewals++
				renewalBytes += storedLeaseSize(t, l)
			case peerlease.IsServedRecord(l):
				served++
				before, now := recorded[l.Name], content(l)
				recorded[l.Name] = now
				t.Errorf("served-record Lease %s written at +%v on a quiet plane (list changed: %v; discovery ETags %q -> %q)",
					l.Name, time.Since(start).Round(100*time.Millisecond), before[0] != now[0], before[1], now[1])
			case peerlease.IsIdentity(l):
				identityWrites++
				identityBytes += storedLeaseSize(t, l)
			}
		case <-timeout:
			done = true
		}
	}
	// Renewals every 5 s: 4 per server in the window, one fewer by phase.
	if renewals < 3*len(ids) || identityWrites < len(ids) {
		t.Errorf("%d renewals and %d identity Lease writes of %d servers in %v: the watch saw too few to tell", renewals, identityWrites, len(ids), renewalWindow)
	}
	if renewalBytes > 2*identityBytes {
		t.Errorf("registration renewals wrote %d bytes in %v, more than twice upstream's identity Leases (%d bytes)", renewalBytes, renewalWindow, identityBytes)
	}
	t.Logf("in %v: %d renewals (%d bytes as stored), %d identity Lease writes (%d bytes), %d served-record writes", renewalWindow, renewals, renewalBytes, identityWrites, identityBytes, served)
}

// renewalWindow is how long TestRenewalsCarryOnlyLiveness watches Leases.
const renewalWindow = 20 * time.Second

// leaseEncoder encodes a Lease as kube-apiserver stores it in etcd.
var leaseEncoder = scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), coordinationv1.SchemeGroupVersion)

// storedLeaseSize is l's size as kube-apiserver stores it.
func storedLeaseSize(t *testing.T, l *coordinationv1.Lease) int {
	t.Helper()
	var b bytes.Buffer
	if err := leaseEncoder.Encode(l, &b); err != nil {
		t.Fatal(err)
	}
	return b.Len()
}

// Between changes, a refresh asks each server only for its /version (the
// readiness heartbeat, #48): over ten refreshes of a quiet plane a replica
// reads each server's discovery in full at most twice (a CRD or
// APIService change left over from an earlier test, and the record of new
// discovery ETags that follows it; the safety poll is 10 min), where a
// full read per refresh made 10 per server. That a change is still read
// at once is crd_test's and skew_test's.
func TestRefreshesBetweenChangesAreHeartbeats(t *testing.T) {
	ids := readyPlane(t)
	reads := func(i int) (full, beats float64) {
		m := scrape(t, cluster.ExtensionConfig(i))
		for _, v := range m["peerdiscovery_scrape_duration_seconds_count"] {
			full += v
		}
		for _, v := range m["peerdiscovery_heartbeat_duration_seconds_count"] {
			beats += v
		}
		return full, beats
	}
	replicas := len(cluster.Extensions())
	fullBefore, beatsBefore := make([]float64, replicas), make([]float64, replicas)
	for i := range replicas {
		fullBefore[i], beatsBefore[i] = reads(i)
	}
	const refreshes = 10
	time.Sleep(refreshes * localcluster.DefaultRefreshInterval)
	for i := range replicas {
		full, beats := reads(i)
		full, beats = full-fullBefore[i], beats-beatsBefore[i]
		t.Logf("replica %d, %d servers, %d refreshes: %.0f full reads, %.0f heartbeats", i, len(ids), refreshes, full, beats)
		if full > float64(2*len(ids)) {
			t.Errorf("replica %d: %.0f full reads of %d servers in %d refreshes, want at most %d", i, full, len(ids), refreshes, 2*len(ids))
		}
		if beats < float64((refreshes-3)*len(ids)) {
			t.Errorf("replica %d: %.0f heartbeats of %d servers in %d refreshes, want at least %d", i, beats, len(ids), refreshes, (refreshes-3)*len(ids))
		}
	}
}

// waitRecordsCurrent waits until each server's served record holds the
// discovery ETags the server answers with now (profile=nopeer, as its
// filter reads them): its filter reads its discovery every minute and
// records a change at the next renewal.
func waitRecordsCurrent(t *testing.T, leases coordinationclient.LeaseInterface, ids map[int]string) {
	t.Helper()
	ctx := context.Background()
	// One client per server for every poll: a client per poll would keep
	// a connection per poll open until the test ends.
	clients := map[int]*nopeer.Client{}
	for i := range ids {
		hc, err := rest.HTTPClientFor(cluster.AdminConfig(i))
		if err != nil {
			t.Fatal(err)
		}
		defer hc.CloseIdleConnections()
		clients[i] = nopeer.NewClient(hc, 8<<20)
	}
	planetest.WaitFor(t, 90*time.Second, "served records holding their servers' discovery ETags", func() error {
		for i, id := range ids {
			docs, _, err := clients[i].ReadDocuments(ctx, cluster.AdminConfig(i).Host, nil)
			if err != nil {
				return err
			}
			l, err := leases.Get(ctx, peerlease.ServedLeaseName(id), metav1.GetOptions{})
			if err != nil {
				return err
			}
			rec, err := peerlease.ParseServedRecord(l)
			if err != nil {
				return err
			}
			if want := (peerlease.DiscoveryETags{API: docs.APIETag, APIs: docs.APIsETag}); rec.ETags != want {
				return fmt.Errorf("kube-apiserver-%d records %+v, serves %+v", i, rec.ETags, want)
			}
		}
		return nil
	})
}

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
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/test/pki"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestSlowWritesFinishWhenPeerLeaves: writes proxied from the old server
// to a capable server that is then stopped gracefully (SIGTERM, as a
// rolling upgrade stops each server) all succeed. The leaving server
// finishes its requests in flight during its shutdown; the filter must not
// end them when the view marks it not ready. The writes are made slow by a
// validating admission webhook that holds them until the old server's view
// has said for a while that the leaving server is not ready. On the code
// before the fix every one of them got 504 ("did not answer in time; it was
// not retried"), as an update did in CI's upgrade drill.
func TestSlowWritesFinishWhenPeerLeaves(t *testing.T) {
	ids, victim, run := startWriteRun(t, "graceful")
	hook := startHoldingWebhook(t, run)

	// The webhook is in force on the leaving server once a write made
	// there reached it.
	direct := svmClient(t, victim)
	probes := 0
	planetest.WaitFor(t, time.Minute, "the webhook called by "+cluster.Servers()[victim].Name, func() error {
		probes++
		if o := postSVM(direct, run, 1000+probes); o.err != nil {
			return o.err
		}
		if hook.seen(strconv.Itoa(1000 + probes)) {
			return nil
		}
		return errors.New("a write went through without the webhook")
	})

	const writes = 6
	hook.hold()
	results := make(chan []outcome, 1)
	go func() {
		results <- runWriteLoad(t, run, writes, writes, time.Minute, func(int) {})
	}()
	planetest.WaitFor(t, time.Minute, strconv.Itoa(writes)+" writes held in the webhook", func() error {
		if n := hook.held(); n < writes {
			return errors.New(strconv.Itoa(n) + " held")
		}
		return nil
	})

	// The graceful stop waits for the held writes: it runs beside.
	stopped := make(chan error, 1)
	go func() { stopped <- cluster.StopAPIServer(victim, syscall.SIGTERM) }()
	planetest.WaitFor(t, time.Minute, "the old server's view marks "+ids[victim]+" not ready", func() error {
		p, err := pd(t, old).PeerdiscoveryV1alpha1().APIServerPeers().Get(context.Background(), ids[victim], metav1.GetOptions{})
		if err != nil {
			return err
		}
		if planetest.Ready(p) {
			return errors.New("still ready")
		}
		return nil
	})
	// Long enough for the old server's filter to have ended its requests
	// to the leaving server, had it meant to (the informer's delivery, the
	// table rebuild and the 2 s the filter gives a departure to show).
	time.Sleep(5 * time.Second)
	hook.release()

	got := <-results
	if err := <-stopped; err != nil {
		t.Errorf("stopping %s: %v", cluster.Servers()[victim].Name, err)
	}
	codes, slowest := summarize(got)
	created, objects := checkAtMostOnce(t, run, got)
	t.Logf("%d writes held in the webhook across the SIGTERM of %s: answers %v, %d created, %d objects, slowest %v",
		len(got), cluster.Servers()[victim].Name, codes, created, objects-probes, slowest.Round(time.Millisecond))
	if len(got) != writes || codes[http.StatusCreated] != writes {
		for i, o := range got {
			if o.code != http.StatusCreated {
				t.Errorf("write %d: %d %v", i, o.code, o.err)
			}
		}
		t.Fatalf("%d of %d writes succeeded; a server that stops gracefully must finish them", codes[http.StatusCreated], writes)
	}
}

// holdingWebhook is a validating admission webhook for the run's
// StorageVersionMigrations that allows every write, at once or, while
// holding, once released.
type holdingWebhook struct {
	mu       sync.Mutex
	attempts map[string]bool // attempt labels seen
	holding  bool
	waiting  int
	released chan struct{}
}

func (h *holdingWebhook) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding = true
}

func (h *holdingWebhook) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holding {
		h.holding = false
		close(h.released)
	}
}

func (h *holdingWebhook) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

func (h *holdingWebhook) seen(attempt string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attempts[attempt]
}

func (h *holdingWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	var obj metav1.PartialObjectMetadata
	_ = json.Unmarshal(review.Request.Object.Raw, &obj)
	h.mu.Lock()
	h.attempts[obj.Labels[attemptLabel]] = true
	holding, released := h.holding, h.released
	if holding {
		h.waiting++
	}
	h.mu.Unlock()
	if holding {
		select {
		case <-released:
		case <-r.Context().Done():
			return
		}
	}
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// startHoldingWebhook serves the webhook over TLS on the host side of the
// plane's network and registers it for the run's StorageVersionMigrations;
// both go when the test ends.
func startHoldingWebhook(t *testing.T, run string) *holdingWebhook {
	t.Helper()
	h := &holdingWebhook{attempts: map[string]bool{}, released: make(chan struct{})}
	ca := pki.NewCA(t, "e2e-webhook-ca")
	host := cluster.HostAddress()
	_, _, pair := ca.Issue(t, host, x509.ExtKeyUsageServerAuth, nil, []net.IP{net.ParseIP(host)})
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		h.release()
		_ = srv.Close()
	})

	url := "https://" + ln.Addr().String() + "/validate"
	fail, none, timeout := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, int32(30)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-holding-" + run},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "holding.e2e.peerdiscovery.k8s.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.CertPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{svm.Group}, APIVersions: []string{svm.Version}, Resources: []string{svm.Resource}}}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{runLabel: run}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	webhooks := planetest.Kube(t, cluster.AdminConfig(new1)).AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := webhooks.Create(context.Background(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Runs before the server closes (cleanups run last first), so no
	// write of the run is left failing on a webhook that is gone.
	t.Cleanup(func() {
		if err := webhooks.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting the webhook configuration: %v", err)
		}
	})
	return h
}

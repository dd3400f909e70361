package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	versioned "sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
)

const acceptV2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

func waitFor(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func kube(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dyn(t *testing.T, cfg *rest.Config) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pd(t *testing.T, i int) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(cluster.AdminConfig(i))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// raw does one request with cfg's credentials and returns status, headers, body.
func raw(t *testing.T, cfg *rest.Config, method, path string, body io.Reader, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(cfg.Host, "/")+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// discovery fetches a server's /apis (or /api) aggregated document.
func discovery(t *testing.T, i int, path string, nopeer bool) ([]apidiscoveryv2.APIGroupDiscovery, string, []byte) {
	t.Helper()
	accept := acceptV2
	if nopeer {
		accept += ";profile=nopeer"
	}
	code, h, body := raw(t, cluster.AdminConfig(i), http.MethodGet, path, nil, "Accept", accept)
	if code != http.StatusOK {
		t.Fatalf("server %d GET %s: %d %s", i, path, code, body)
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	return list.Items, h.Get("ETag"), body
}

func gvrSet(groups []apidiscoveryv2.APIGroupDiscovery) map[schema.GroupVersionResource]bool {
	out := map[schema.GroupVersionResource]bool{}
	for _, g := range groups {
		for _, v := range g.Versions {
			for _, r := range v.Resources {
				out[schema.GroupVersionResource{Group: g.Name, Version: v.Version, Resource: r.Resource}] = true
			}
		}
	}
	return out
}

func sortedGVRs(s map[schema.GroupVersionResource]bool) []string {
	var out []string
	for gvr := range s {
		out = append(out, gvr.String())
	}
	sort.Strings(out)
	return out
}

// serverIDs maps server index → peer identity, from the APIServerPeers'
// endpoints.
func serverIDs(t *testing.T) map[int]string {
	t.Helper()
	out := map[int]string{}
	waitFor(t, 2*time.Minute, "every kube-apiserver known as a ready peer", func() error {
		peers, err := pd(t, new1).PeerdiscoveryV1alpha1().APIServerPeers().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i, s := range cluster.Servers() {
			for _, p := range peers.Items {
				host, _, _ := net.SplitHostPort(p.Spec.Endpoint)
				if host == s.IP && ready(&p) && hasSource(&p, v1alpha1.PeerSourceRegistrationLease) {
					out[i] = p.Spec.ServerID
				}
			}
		}
		if len(out) != len(cluster.Servers()) {
			return fmt.Errorf("ready peers by server: %v", out)
		}
		return nil
	})
	return out
}

func hasSource(p *v1alpha1.APIServerPeer, src v1alpha1.PeerSource) bool {
	for _, s := range p.Spec.Sources {
		if s == src {
			return true
		}
	}
	return false
}

func ready(p *v1alpha1.APIServerPeer) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

var metricLine = regexp.MustCompile(`^apiserver_rerouted_request_total\{([^}]*)\} ([0-9.e+]+)$`)

// rerouted sums apiserver_rerouted_request_total on server i for a resource.
func rerouted(t *testing.T, i int, group, resource string) float64 {
	t.Helper()
	code, _, body := raw(t, cluster.AdminConfig(i), http.MethodGet, "/metrics", nil)
	if code != http.StatusOK {
		t.Fatalf("metrics of server %d: %d", i, code)
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		m := metricLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if !strings.Contains(m[1], `group="`+group+`"`) || !strings.Contains(m[1], `resource="`+resource+`"`) {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		sum += v
	}
	return sum
}

func review(t *testing.T, i int, verb, path, source string) v1alpha1.RouteReviewStatus {
	t.Helper()
	r, err := pd(t, i).PeerdiscoveryV1alpha1().RouteReviews().Create(context.Background(), &v1alpha1.RouteReview{
		Spec: v1alpha1.RouteReviewSpec{Verb: verb, Path: path, SourcePeer: source},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("RouteReview %s %s from %s: %v", verb, path, source, err)
	}
	return r.Status
}

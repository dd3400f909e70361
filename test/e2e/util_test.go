package e2e

import (
	"bytes"
	"sort"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	versioned "sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
)

type kubernetesInterface = kubernetes.Interface

func pdFor(t *testing.T, cfg *rest.Config) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func routeName(gvr schema.GroupVersionResource) string { return compute.RouteName(gvr) }

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func ptrTrue() *bool { b := true; return &b }

// syncBuffer is a bytes.Buffer safe for a writer process and a reader test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func dynForBench(i int) (dynamicResource, error) {
	d, err := dynamic.NewForConfig(cluster.AdminConfig(i))
	if err != nil {
		return nil, err
	}
	return d.Resource(svm), nil
}

type dynamicResource = dynamic.NamespaceableResourceInterface

func metav1CreateOptions() metav1.CreateOptions { return metav1.CreateOptions{} }

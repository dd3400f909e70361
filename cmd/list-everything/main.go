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

// Command list-everything lists every object of every listable resource in
// the cluster, as a garbage-collector-like controller would, through the
// peer-aggregated discovery view (pkg/discoveryclient) and the metadata
// client, and prints a count per resource. Connected to any one
// kube-apiserver it also sees APIs only other servers serve.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"

	"sigs.k8s.io/peerdiscovery/pkg/discoveryclient"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to the kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
	kubeContext := flag.String("context", "", "kubeconfig context to use")
	flag.Parse()
	if err := run(*kubeconfig, *kubeContext); err != nil {
		fmt.Fprintln(os.Stderr, "list-everything:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, kubeContext string) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dc, err := discoveryclient.New(cfg)
	if err != nil {
		return err
	}
	dc.Start(ctx)
	if err := dc.WaitForSync(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "warning:", err) // a FallbackError: one server's view only
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		var fe *discoveryclient.FallbackError
		if !errors.As(err, &fe) && !discovery.IsGroupDiscoveryFailedError(err) {
			return err
		}
		fmt.Fprintln(os.Stderr, "warning:", err) // partial results
	}
	listable := discovery.FilteredBy(discovery.SupportsAllVerbs{Verbs: []string{"list"}}, lists)
	gvrs, err := discovery.GroupVersionResources(listable)
	if err != nil {
		return err
	}
	var sorted []schema.GroupVersionResource
	for gvr := range gvrs {
		sorted = append(sorted, gvr)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].String() < sorted[j].String() })

	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	failed := 0
	for _, gvr := range sorted {
		n, err := count(ctx, mc, gvr)
		name := gvr.Resource + "." + gvr.Version
		if gvr.Group != "" {
			name += "." + gvr.Group
		}
		if err != nil {
			failed++
			fmt.Printf("%-60s error: %v\n", name, err)
			continue
		}
		fmt.Printf("%-60s %d\n", name, n)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d resources could not be listed", failed, len(sorted))
	}
	return nil
}

// count lists a resource's object metadata in pages.
func count(ctx context.Context, mc metadata.Interface, gvr schema.GroupVersionResource) (int, error) {
	n := 0
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := mc.Resource(gvr).List(ctx, opts)
		if err != nil {
			return n, err
		}
		n += len(l.Items)
		if l.Continue == "" {
			return n, nil
		}
		opts.Continue = l.Continue
	}
}

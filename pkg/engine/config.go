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
	"fmt"
	"os"

	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	aggregatorinformers "k8s.io/kube-aggregator/pkg/client/informers/externalversions"
	"k8s.io/utils/clock"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// Clients are the API clients the engine watches through.
type Clients struct {
	Kube          kubernetes.Interface
	APIExtensions apiextensionsclient.Interface
	Aggregator    aggregatorclient.Interface
}

// NewClients builds the clients from one config.
func NewClients(cfg *rest.Config) (Clients, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	agg, err := aggregatorclient.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	return Clients{Kube: kube, APIExtensions: ext, Aggregator: agg}, nil
}

// Config is everything an engine is built from.
type Config struct {
	Options Options
	// Clients are what the engine watches Leases, EndpointSlices, CRDs and
	// APIServices through, and records Events with (when Kube is set).
	Clients Clients
	// Publisher receives every computed view.
	Publisher Publisher
	// RESTConfig carries the credentials peers are read with; only used to
	// build the default Scrape.
	RESTConfig *rest.Config
	// Scrape reads one peer. Nil: a Scraper built from RESTConfig and
	// Options (peer CA, server name, size bound).
	Scrape ScrapeFunc
	// Heartbeat asks one peer for its version. Nil: the Scraper's, and
	// then Scrape must be nil too.
	Heartbeat HeartbeatFunc
	// Clock is the engine's time source. Nil: the real clock.
	Clock clock.WithTicker
	// PeerUID is the UID the Publisher's store gives the APIServerPeer of
	// a name (the same on every replica). Events name it: kubectl describe
	// finds an object's Events by UID. Nil: Events carry no UID.
	PeerUID func(name string) types.UID
}

// CompletedConfig is a Config with every default filled in; only
// Config.Complete makes one.
type CompletedConfig struct {
	*completedConfig
}

type completedConfig struct {
	Config
}

// Complete fills in the defaults: the real clock, and the HTTPS scraper
// (which reads the peer CA now, so a missing one fails at startup).
func (c Config) Complete() (CompletedConfig, error) {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if (c.Scrape == nil) != (c.Heartbeat == nil) {
		return CompletedConfig{}, fmt.Errorf("engine config: Scrape and Heartbeat are set together or not at all")
	}
	if c.Scrape == nil {
		caData, err := peerCA(c.Options.PeerCAFile, c.RESTConfig)
		if err != nil {
			return CompletedConfig{}, err
		}
		s, err := NewScraper(c.RESTConfig, caData, c.Options.PeerServerName, c.Options.MaxDiscoveryBytes)
		if err != nil {
			return CompletedConfig{}, fmt.Errorf("building the peer client: %w", err)
		}
		c.Scrape, c.Heartbeat = s.Scrape, s.Heartbeat
	}
	return CompletedConfig{&completedConfig{c}}, nil
}

// New builds the engine; Run starts it.
func (c CompletedConfig) New() (*Engine, error) {
	registerMetrics()
	opts, clients := c.Options, c.Clients
	e := &Engine{
		opts: opts, clock: c.Clock, scrape: c.Scrape, heartbeat: c.Heartbeat, publisher: c.Publisher, clients: clients, peerUID: c.PeerUID,
		peers:           map[string]*peerState{},
		lastClusterWide: map[schema.GroupVersion]string{},
		deletedGVs:      map[schema.GroupVersion]bool{},
		badLeases:       map[string]string{},
		trigger:         make(chan struct{}, 1),
		results:         make(chan scrapeResult, 64),
		sem:             make(chan struct{}, opts.ScrapeConcurrency),
	}
	kubeSystem := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0, informers.WithNamespace(peerlease.Namespace))
	e.leases = kubeSystem.Coordination().V1().Leases().Informer()
	defaults := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=kubernetes" }))
	e.slices = defaults.Discovery().V1().EndpointSlices().Informer()
	e.crds = apiextensionsinformers.NewSharedInformerFactory(clients.APIExtensions, 0).Apiextensions().V1().CustomResourceDefinitions().Informer()
	e.apiservice = aggregatorinformers.NewSharedInformerFactory(clients.Aggregator, 0).Apiregistration().V1().APIServices().Informer()
	for _, inf := range []cache.SharedIndexInformer{e.leases, e.slices, e.crds, e.apiservice} {
		changed := e.poke
		if inf == e.leases {
			// Heard before the poke, so the reconcile it causes trusts
			// the watch (lapseJudgeTime).
			changed = func() {
				e.leaseHeard.Store(e.clock.Now().UnixNano())
				e.poke()
			}
		}
		if inf == e.crds || inf == e.apiservice {
			changed = func() {
				e.discoveryEvent.Store(e.clock.Now().UnixNano())
				e.poke()
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc: func(_ interface{}, initial bool) {
				if initial {
					e.poke() // a replica's first reads are full reads anyway
					return
				}
				changed()
			},
			UpdateFunc: func(old, cur interface{}) { changed() },
			DeleteFunc: func(interface{}) { changed() },
		}); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// peerCA is the CA that signs peers' serving certificates: --peer-ca-file,
// else the CA the kubeconfig (or in-cluster config) trusts.
func peerCA(file string, cfg *rest.Config) ([]byte, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--peer-ca-file: %w", err)
		}
		return data, nil
	}
	if cfg == nil {
		return nil, fmt.Errorf("no peer CA: set --peer-ca-file")
	}
	if len(cfg.TLSClientConfig.CAData) > 0 {
		return cfg.TLSClientConfig.CAData, nil
	}
	if cfg.TLSClientConfig.CAFile != "" {
		return os.ReadFile(cfg.TLSClientConfig.CAFile)
	}
	return nil, fmt.Errorf("no peer CA: set --peer-ca-file (the kubeconfig has no CA either)")
}

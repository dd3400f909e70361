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

// Package apiserver assembles peerdiscovery-apiserver: the generic API
// server with the peerdiscovery.k8s.io group installed over in-memory views.
package apiserver

import (
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/rest"
	componentbaseconfig "k8s.io/component-base/config"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/install"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/engine"
	registry "sigs.k8s.io/peerdiscovery/pkg/registry/peerdiscovery"
)

var (
	// Scheme holds the group's internal and v1alpha1 types.
	Scheme = runtime.NewScheme()
	// Codecs serializes them.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	install.Install(Scheme)
	// Options and status types every API server needs (as sample-apiserver).
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{},
		&metav1.APIGroup{}, &metav1.APIResourceList{},
	)
}

// DefaultStaleAfter is the default of ExtraConfig.StaleAfter and of
// --stale-after: many engine refresh intervals (10s by default), so only a
// stuck engine makes the server unready.
const DefaultStaleAfter = 2 * time.Minute

// ExtraConfig is what this server adds to the generic config.
type ExtraConfig struct {
	// StaleAfter makes the server unready when the last published view is
	// older than this (default DefaultStaleAfter).
	StaleAfter time.Duration
	// Clock is the time source of readiness (tests replace it).
	Clock clock.PassiveClock
	// Engine, when set, runs the peer engine against the cluster of
	// GenericConfig.ClientConfig and publishes into the server's stores.
	// Tests leave it nil and publish views themselves.
	Engine *engine.Options
	// EventElection, when set, elects the one replica whose engine emits
	// Events (every replica computes and serves its own view).
	EventElection *EventElectionConfig
}

// EventElectionConfig configures the election of the replica that emits
// Events.
type EventElectionConfig struct {
	// Identity names this replica in the Lease (hostname_uuid).
	Identity       string
	LeaderElection componentbaseconfig.LeaderElectionConfiguration
}

// Config is the server's configuration.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	ExtraConfig   ExtraConfig
}

type completedConfig struct {
	GenericConfig genericapiserver.CompletedConfig
	ExtraConfig   *ExtraConfig
	// ClientConfig reaches the cluster (--kubeconfig or in-cluster).
	ClientConfig *rest.Config
}

// CompletedConfig is a Config with defaults filled in.
type CompletedConfig struct {
	*completedConfig
}

// Server is a running peerdiscovery-apiserver.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
	// Publisher is where the peer engine publishes what it computed.
	Publisher *registry.Publisher
	// Stores hold the published objects; Stop ends their watches.
	Stores *registry.Stores
	// Engine is nil when ExtraConfig.Engine was.
	Engine *engine.Engine
}

// Complete fills in defaults.
func (cfg *Config) Complete() CompletedConfig {
	if cfg.ExtraConfig.StaleAfter == 0 {
		cfg.ExtraConfig.StaleAfter = DefaultStaleAfter
	}
	if cfg.ExtraConfig.Clock == nil {
		cfg.ExtraConfig.Clock = clock.RealClock{}
	}
	return CompletedConfig{&completedConfig{cfg.GenericConfig.Complete(), &cfg.ExtraConfig, cfg.GenericConfig.ClientConfig}}
}

// New builds the server and installs the API group.
func (c completedConfig) New() (_ *Server, err error) {
	genericServer, err := c.GenericConfig.New("peerdiscovery-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	stores := registry.NewStores()
	defer func() {
		if err != nil {
			stores.Stop() // their bookmark timers
		}
	}()
	publisher := registry.NewPublisher(stores, c.ExtraConfig.Clock)
	if err := genericServer.AddReadyzChecks(viewFresh(publisher, c.ExtraConfig.Clock, c.ExtraConfig.StaleAfter)); err != nil {
		return nil, err
	}
	// Watches end when the server stops accepting requests, not when the
	// shutdown starts: during the shutdown delay /readyz fails, the
	// replica leaves the Service's endpoints and the aggregator sends new
	// requests (re-watches) to the other replicas while this one still
	// answers. Ending them earlier would have the clients re-watch here and
	// be refused. Pre-shutdown hooks run at the start of the shutdown.
	delay := c.GenericConfig.ShutdownDelayDuration
	genericServer.AddPreShutdownHookOrDie("peerdiscovery-stop-watches", func() error {
		time.AfterFunc(delay, stores.Stop)
		return nil
	})

	apiGroupInfo := genericapiserver.NewDefaultAPIGroupInfo(api.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	apiGroupInfo.NegotiatedSerializer = NegotiatedSerializer
	apiGroupInfo.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = registry.Storage(stores, publisher)
	if err := genericServer.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, err
	}
	srv := &Server{GenericAPIServer: genericServer, Publisher: publisher, Stores: stores}
	if c.ExtraConfig.Engine == nil {
		return srv, nil
	}
	clients, err := engine.NewClients(c.ClientConfig)
	if err != nil {
		return nil, err
	}
	engineConfig, err := engine.Config{Options: *c.ExtraConfig.Engine, Clients: clients, Publisher: publisher, PeerUID: registry.PeerUID, RESTConfig: c.ClientConfig}.Complete()
	if err != nil {
		return nil, err
	}
	if srv.Engine, err = engineConfig.New(); err != nil {
		return nil, err
	}
	var voice *eventVoice
	if ec := c.ExtraConfig.EventElection; ec != nil {
		if voice, err = newEventVoice(ec, clients); err != nil {
			return nil, err
		}
		srv.Engine.SetEventGate(voice.leading.Load)
	}
	genericServer.AddPostStartHookOrDie("peerdiscovery-engine", func(ctx genericapiserver.PostStartHookContext) error {
		if voice != nil {
			go voice.run(ctx)
		}
		go func() {
			if err := srv.Engine.Run(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Peer engine stopped")
			}
		}()
		return nil
	})
	return srv, nil
}

// viewFresh fails until a first view was published and whenever the last
// one is older than staleAfter: a replica serving a frozen view must not
// receive traffic from the aggregator.
func viewFresh(p *registry.Publisher, clk clock.PassiveClock, staleAfter time.Duration) healthz.HealthChecker {
	return healthz.NamedCheck("peerdiscovery-view", func(_ *http.Request) error {
		last := p.LastPublished()
		if last.IsZero() {
			return fmt.Errorf("no view computed yet")
		}
		if age := clk.Since(last); age > staleAfter {
			return fmt.Errorf("view is stale: last computed %s ago (limit %s)", age.Round(time.Second), staleAfter)
		}
		return nil
	})
}

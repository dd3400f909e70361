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
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfig "k8s.io/component-base/config"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/install"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/engine"
	registry "sigs.k8s.io/peerdiscovery/pkg/registry/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/replication"
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
	// GenericConfig.ClientConfig and publishes into the server's view.
	// Tests leave it nil and publish views themselves.
	Engine *engine.Options
	// Replication, when set, makes this server one replica of several: the
	// elected one publishes, the others serve a copy of its stores.
	Replication *ReplicationConfig
}

// ReplicationConfig configures the election among replicas.
type ReplicationConfig struct {
	// Identity is replication.NewIdentity of where the others reach this one.
	Identity       string
	LeaderElection componentbaseconfig.LeaderElectionConfiguration
	// APIService verifies the other replicas (its caBundle and Service).
	APIService string
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
	// View is where the peer engine publishes what it computed.
	View *registry.ViewStore
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
	if lr := cfg.GenericConfig.LongRunningFunc; lr != nil {
		// The replication stream lives as long as the leader: no request
		// timeout (it has its own heartbeat).
		cfg.GenericConfig.LongRunningFunc = func(r *http.Request, ri *apirequest.RequestInfo) bool {
			return r.URL.Path == replication.Path || lr(r, ri)
		}
	}
	return CompletedConfig{&completedConfig{cfg.GenericConfig.Complete(), &cfg.ExtraConfig, cfg.GenericConfig.ClientConfig}}
}

// New builds the server and installs the API group.
func (c completedConfig) New() (*Server, error) {
	genericServer, err := c.GenericConfig.New("peerdiscovery-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	// Without the engine (tests publish views themselves) there is nothing
	// to elect: the store leads from the start.
	standby := c.ExtraConfig.Replication != nil && c.ExtraConfig.Engine != nil
	view := registry.NewViewStore(c.ExtraConfig.StaleAfter, c.ExtraConfig.Clock, standby)
	genericServer.Handler.NonGoRestfulMux.Handle(replication.Path, &replication.Handler{Clock: view.Clock()})
	if err := genericServer.AddReadyzChecks(view.ReadyzCheck()); err != nil {
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
		time.AfterFunc(delay, view.Stop)
		return nil
	})

	apiGroupInfo := genericapiserver.NewDefaultAPIGroupInfo(api.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	apiGroupInfo.NegotiatedSerializer = NegotiatedSerializer
	apiGroupInfo.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = view.Storage()
	if err := genericServer.InstallAPIGroup(&apiGroupInfo); err != nil {
		return nil, err
	}
	srv := &Server{GenericAPIServer: genericServer, View: view}
	if c.ExtraConfig.Engine != nil {
		restConfig := c.ClientConfig
		clients, err := engine.NewClients(restConfig)
		if err != nil {
			return nil, err
		}
		engineConfig, err := engine.Config{Options: *c.ExtraConfig.Engine, Clients: clients, Publisher: view, PeerUID: view.PeerUID, RESTConfig: restConfig}.Complete()
		if err != nil {
			return nil, err
		}
		if srv.Engine, err = engineConfig.New(); err != nil {
			return nil, err
		}
		if rc := c.ExtraConfig.Replication; rc != nil {
			srv.Engine.SetEventGate(view.Leading)
			if err := addReplication(genericServer, rc, restConfig, clients, view); err != nil {
				return nil, err
			}
		}
		genericServer.AddPostStartHookOrDie("peerdiscovery-engine", func(ctx genericapiserver.PostStartHookContext) error {
			go func() {
				if err := srv.Engine.Run(ctx); err != nil {
					klog.FromContext(ctx).Error(err, "Peer engine stopped")
				}
			}()
			return nil
		})
	}
	return srv, nil
}

// addReplication starts the election among replicas after the server
// serves (the others reach this one's stream through it).
func addReplication(s *genericapiserver.GenericAPIServer, rc *ReplicationConfig, restConfig *rest.Config, clients engine.Clients, view *registry.ViewStore) error {
	replication.RegisterMetrics()
	le := rc.LeaderElection
	lock, err := resourcelock.New(le.ResourceLock, le.ResourceNamespace, le.ResourceName,
		clients.Kube.CoreV1(), clients.Kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: rc.Identity})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	follower := &replication.Follower{
		Replica: view,
		Dial:    (&replication.APIServiceDialer{Base: restConfig, Aggregator: clients.Aggregator, APIService: rc.APIService}).Dial,
	}
	cfg := replication.ElectionConfig{
		Lock: lock, LeaseDuration: le.LeaseDuration.Duration, RenewDeadline: le.RenewDeadline.Duration, RetryPeriod: le.RetryPeriod.Duration,
	}
	s.AddPostStartHookOrDie("peerdiscovery-replication", func(ctx genericapiserver.PostStartHookContext) error {
		go replication.Run(ctx, cfg, view, follower)
		return nil
	})
	return nil
}

// Package apiserver assembles peerdiscovery-apiserver: the generic API
// server with the peerdiscovery.k8s.io group installed over in-memory views.
package apiserver

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
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

// ExtraConfig is what this server adds to the generic config.
type ExtraConfig struct {
	// StaleAfter makes the server unready when the last published view is
	// older than this.
	StaleAfter time.Duration
	// Clock is the time source of readiness (tests replace it).
	Clock clock.PassiveClock
	// Engine, when set, runs the peer engine against the cluster of
	// GenericConfig.ClientConfig and publishes into the server's view.
	// Tests leave it nil and publish views themselves.
	Engine *engine.Options
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
		cfg.ExtraConfig.StaleAfter = 2 * time.Minute
	}
	if cfg.ExtraConfig.Clock == nil {
		cfg.ExtraConfig.Clock = clock.RealClock{}
	}
	return CompletedConfig{&completedConfig{cfg.GenericConfig.Complete(), &cfg.ExtraConfig, cfg.GenericConfig.ClientConfig}}
}

// New builds the server and installs the API group.
func (c completedConfig) New() (*Server, error) {
	genericServer, err := c.GenericConfig.New("peerdiscovery-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	view := registry.NewViewStore(c.ExtraConfig.StaleAfter, c.ExtraConfig.Clock)
	if err := genericServer.AddReadyzChecks(view.ReadyzCheck()); err != nil {
		return nil, err
	}
	genericServer.AddPreShutdownHookOrDie("peerdiscovery-stop-watches", func() error {
		view.Stop()
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
		if srv.Engine, err = engine.New(*c.ExtraConfig.Engine, clients, restConfig, view, nil, nil); err != nil {
			return nil, err
		}
		genericServer.AddPostStartHookOrDie("peerdiscovery-engine", func(ctx genericapiserver.PostStartHookContext) error {
			go func() {
				if err := srv.Engine.Run(ctx); err != nil {
					klog.ErrorS(err, "Peer engine stopped")
				}
			}()
			return nil
		})
	}
	return srv, nil
}

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

// Package server holds the peerdiscovery-apiserver command: its options,
// their validation and the Options -> Config -> Complete -> New -> Run flow.
package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	apiservercompatibility "k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/transport"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	componentbaseconfig "k8s.io/component-base/config"
	componentbaseoptions "k8s.io/component-base/config/options"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	baseversion "k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	pdapiserver "sigs.k8s.io/peerdiscovery/pkg/apiserver"
	"sigs.k8s.io/peerdiscovery/pkg/engine"
	generatedopenapi "sigs.k8s.io/peerdiscovery/pkg/generated/openapi"
)

func init() {
	// k8s.io/apiserver registers the binary's own version as the
	// Kubernetes version to emulate. This server's (v0.1.0, stamped by the
	// image build) is not one: emulating Kubernetes 0.1 turned every
	// versioned feature gate off, WatchList among them, so every
	// watch-list of a peerdiscovery resource was refused (422) and the
	// filters' informers fell back to a LIST and a WATCH, which the
	// aggregator may send to different replicas (410, then client-go's
	// backoff: a filter's view lagged by up to 30 s). The server is built
	// on the libraries of Kubernetes DefaultKubeBinaryVersion and behaves
	// as that release. A registered binary version cannot be changed, so
	// the registry is reset: it holds only k8s.io/apiserver's own
	// registration at this point (no other component of this binary
	// registers one).
	apiservercompatibility.DefaultComponentGlobalsRegistry.Reset()
	utilruntime.Must(apiservercompatibility.DefaultComponentGlobalsRegistry.Register(basecompatibility.DefaultKubeComponent,
		basecompatibility.NewEffectiveVersionFromString(baseversion.DefaultKubeBinaryVersion, "", ""), utilfeature.DefaultMutableFeatureGate))
	// Logging features (contextual logging, ...) live in the server's gate.
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
}

// Options are the command line options of peerdiscovery-apiserver.
type Options struct {
	// RecommendedOptions without etcd (state is derived from live peers,
	// nothing to persist) and without admission (nothing is written).
	RecommendedOptions *genericoptions.RecommendedOptions
	Logs               *logsapi.LoggingConfiguration
	Engine             *engine.Options

	// StaleAfter is how old the computed view may get before /readyz fails.
	StaleAfter time.Duration
	// AlternateDNS are extra names for the self-signed serving certificate.
	AlternateDNS []string
	// LeaderElection elects the replica that emits Events; every replica
	// computes and serves its own view.
	LeaderElection componentbaseconfig.LeaderElectionConfiguration
	// ShutdownDelay keeps serving after SIGTERM while /readyz fails, so the
	// aggregator moves to the other replicas before this one goes away.
	ShutdownDelay time.Duration
}

// NewOptions returns options with defaults.
func NewOptions() *Options {
	ro := genericoptions.NewRecommendedOptions("", pdapiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion))
	ro.Etcd = nil
	ro.Admission = nil
	// Requests reach us through the aggregator, whose priority and fairness
	// already applied; a second APF here would need flowcontrol RBAC for
	// nothing (as metrics-server).
	ro.Features.EnablePriorityAndFairness = false
	// Self-signed certificates land here when no --tls-cert-file is given;
	// a directory under /tmp works with a read-only root filesystem.
	ro.SecureServing.ServerCert.CertDirectory = ""
	ro.SecureServing.BindPort = 6443
	return &Options{
		RecommendedOptions: ro,
		Logs:               logsapi.NewLoggingConfiguration(),
		Engine:             engine.NewOptions(),
		StaleAfter:         pdapiserver.DefaultStaleAfter,
		LeaderElection: componentbaseconfig.LeaderElectionConfiguration{
			LeaderElect:       true,
			LeaseDuration:     metav1.Duration{Duration: 15 * time.Second},
			RenewDeadline:     metav1.Duration{Duration: 10 * time.Second},
			RetryPeriod:       metav1.Duration{Duration: 2 * time.Second},
			ResourceLock:      resourcelock.LeasesResourceLock,
			ResourceName:      "peerdiscovery-apiserver",
			ResourceNamespace: "peerdiscovery",
		},
		ShutdownDelay: 5 * time.Second,
	}
}

// Flags returns the options as named flag sets, for readable --help.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	ro := o.RecommendedOptions
	ro.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	ro.Authentication.AddFlags(fss.FlagSet("authentication"))
	ro.Authorization.AddFlags(fss.FlagSet("authorization"))
	ro.Audit.AddFlags(fss.FlagSet("auditing"))
	ro.Features.AddFlags(fss.FlagSet("features"))
	ro.CoreAPI.AddFlags(fss.FlagSet("kubernetes client"))
	ro.EgressSelector.AddFlags(fss.FlagSet("egress selector"))
	ro.Traces.AddFlags(fss.FlagSet("traces"))
	utilfeature.DefaultMutableFeatureGate.AddFlag(fss.FlagSet("features"))

	fs := fss.FlagSet("peerdiscovery")
	if o.Engine != nil {
		o.Engine.AddFlags(fs)
	}
	fs.DurationVar(&o.StaleAfter, "stale-after", o.StaleAfter,
		"/readyz fails when the computed view is older than this (the engine recomputes at least every --refresh-interval).")
	fs.StringSliceVar(&o.AlternateDNS, "alternate-dns", o.AlternateDNS,
		"Extra DNS names for the self-signed serving certificate used when --tls-cert-file is not set.")
	componentbaseoptions.BindLeaderElectionFlags(&o.LeaderElection, fss.FlagSet("leader election"))
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay-duration", o.ShutdownDelay,
		"After SIGTERM, keep serving this long while /readyz fails, so the aggregator sends new requests and re-watches to the other replicas before this one stops. Keep it below the Pod's terminationGracePeriodSeconds.")

	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	verflag.AddFlags(fss.FlagSet("global"))
	globalflag.AddGlobalFlags(fss.FlagSet("global"), "peerdiscovery-apiserver", logs.SkipLoggingConfigurationFlags())
	return fss
}

// Validate returns every problem with the options.
func (o *Options) Validate() error {
	errs := o.RecommendedOptions.Validate()
	if o.Engine != nil {
		errs = append(errs, o.Engine.Validate()...)
	}
	if o.ShutdownDelay < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-delay-duration must not be negative, got %s", o.ShutdownDelay))
	}
	if o.StaleAfter <= 0 {
		errs = append(errs, fmt.Errorf("--stale-after must be positive, got %s", o.StaleAfter))
	}
	if le := o.LeaderElection; le.LeaderElect {
		if le.ResourceLock != resourcelock.LeasesResourceLock {
			errs = append(errs, fmt.Errorf("--leader-elect-resource-lock must be %q, got %q", resourcelock.LeasesResourceLock, le.ResourceLock))
		}
		if le.ResourceName == "" || le.ResourceNamespace == "" {
			errs = append(errs, fmt.Errorf("--leader-elect-resource-name and --leader-elect-resource-namespace must be set"))
		}
		if le.LeaseDuration.Duration <= le.RenewDeadline.Duration || le.RenewDeadline.Duration <= le.RetryPeriod.Duration || le.RetryPeriod.Duration <= 0 {
			errs = append(errs, fmt.Errorf("leader election needs --leader-elect-lease-duration > --leader-elect-renew-deadline > --leader-elect-retry-period > 0, got %s, %s, %s",
				le.LeaseDuration.Duration, le.RenewDeadline.Duration, le.RetryPeriod.Duration))
		}
	}
	return utilerrors.NewAggregate(errs)
}

// Config turns validated options into a server config.
func (o *Options) Config() (*pdapiserver.Config, error) {
	ss := o.RecommendedOptions.SecureServing
	if ss.ServerCert.CertKey.CertFile == "" && ss.ServerCert.CertDirectory == "" {
		dir, err := tempCertDir()
		if err != nil {
			return nil, err
		}
		ss.ServerCert.CertDirectory = dir
	}
	if err := ss.MaybeDefaultWithSelfSignedCerts("localhost", o.AlternateDNS, []net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed certificates: %w", err)
	}

	cfg := genericapiserver.NewRecommendedConfig(pdapiserver.Codecs)
	cfg.Serializer = pdapiserver.NegotiatedSerializer
	namer := openapi.NewDefinitionNamer(pdapiserver.Scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title = "peerdiscovery"
	cfg.OpenAPIConfig.Info.Version = baseversion.Get().GitVersion
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title = "peerdiscovery"
	cfg.OpenAPIV3Config.Info.Version = baseversion.Get().GitVersion
	cfg.FeatureGate = utilfeature.DefaultFeatureGate
	cfg.EffectiveVersion = apiservercompatibility.DefaultComponentGlobalsRegistry.EffectiveVersionFor(basecompatibility.DefaultKubeComponent)

	ro := o.RecommendedOptions
	healthCheck := withHealthCheck(clientHealthCheck)
	if healthCheck != nil && ro.Authentication != nil {
		ro.Authentication.CustomRoundTripperFn = healthCheck
	}
	if healthCheck != nil && ro.Authorization != nil {
		ro.Authorization.CustomRoundTripperFn = healthCheck
	}
	if err := ro.ApplyTo(cfg); err != nil {
		return nil, err
	}
	if healthCheck != nil && cfg.ClientConfig != nil {
		// The engine's clients. First: a wrapper already there (tracing)
		// hides the *http.Transport.
		cfg.ClientConfig.WrapTransport = transport.Wrappers(healthCheck, cfg.ClientConfig.WrapTransport)
	}
	cfg.ShutdownDelayDuration = o.ShutdownDelay
	cfg.Authentication.Authenticator = anonymousOnlyFor(cfg.Authentication.Authenticator, "/livez", "/readyz", "/healthz")
	extra := pdapiserver.ExtraConfig{StaleAfter: o.StaleAfter, Engine: o.Engine}
	if o.LeaderElection.LeaderElect && o.Engine != nil { // without the engine there are no Events
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("the leader election identity: %w", err)
		}
		extra.EventElection = &pdapiserver.EventElectionConfig{
			Identity:       host + "_" + uuid.NewString(),
			LeaderElection: o.LeaderElection,
		}
	}
	return &pdapiserver.Config{GenericConfig: cfg, ExtraConfig: extra}, nil
}

// NewCommand returns the peerdiscovery-apiserver command. run is called
// with the built server; it must block until ctx is done.
func NewCommand(ctx context.Context, o *Options, run func(context.Context, *Options, *pdapiserver.Server) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "peerdiscovery-apiserver",
		Short: "Serves peerdiscovery.k8s.io: the peer-aggregated discovery and routing state of a kube-apiserver control plane",
		Long: `peerdiscovery-apiserver is an extension API server, registered through an
APIService, that learns the kube-apiservers of the control plane, reads their
discovery, and serves the merged view (PeerAggregatedDiscovery), per-resource
routing tables (PeerRoutingTable), the peers (APIServerPeer) and RouteReview.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			verflag.PrintAndExitIfRequested()
			if err := logsapi.ValidateAndApply(o.Logs, utilfeature.DefaultFeatureGate); err != nil {
				return err
			}
			cliflag.PrintFlags(cmd.Flags())
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			srv, err := cfg.Complete().New()
			if err != nil {
				return err
			}
			klog.FromContext(cmd.Context()).Info("Starting peerdiscovery-apiserver", "version", baseversion.Get().GitVersion,
				"address", net.JoinHostPort(o.RecommendedOptions.SecureServing.BindAddress.String(), fmt.Sprint(o.RecommendedOptions.SecureServing.BindPort)))
			return run(cmd.Context(), o, srv)
		},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%q takes no arguments, got %q", cmd.CommandPath(), args)
			}
			return nil
		},
	}
	cmd.SetContext(ctx)
	fss := o.Flags()
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

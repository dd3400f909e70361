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

// Portions of this file follow Kubernetes code (Copyright The Kubernetes
// Authors, Apache License 2.0), as named where they do.

// Command kube-apiserver is the kube-apiserver of one Kubernetes release with
// the peerdiscovery filter linked into its handler chain, written the way an
// operator would: it reproduces app.NewAPIServerCommand() of the release
// (same flags, same option completion and validation) and differs only in
// Run, which inserts the filter innermost in the aggregator chain, exactly
// where upstream inserts its own peer proxy, and registers the filter's
// post-start hook and readyz check.
//
// hack/build-kube-apiserver.sh compiles this file together with one
// release-specific file (v1.MINOR/release.go, for what differs between
// releases in cmd/kube-apiserver/app) in a generated wrapper module that
// requires k8s.io/kubernetes at that release.
//
// The built-in peer proxy (feature gate UnknownVersionInteroperabilityProxy,
// beta and on by default since v1.36) is forced off: this filter replaces it,
// and two peer proxies in one chain would route each other's requests. The
// upstream flags --peer-ca-file, --peer-advertise-ip and --peer-advertise-port
// keep their names and meaning but are handed to the filter instead (upstream
// validation rejects them while the gate is off, so they are taken out of the
// upstream options before completion). --proxy-client-cert-file and
// --proxy-client-key-file are shared with the aggregator, as upstream does.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/flagz"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
	"k8s.io/component-base/term"
	utilversion "k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"

	"sigs.k8s.io/peerdiscovery/pkg/filter"
)

// filterName names the filter's post-start hook and readyz check.
const filterName = "peerdiscovery-filter"

func main() {
	os.Exit(cli.Run(newAPIServerCommand()))
}

// peerFlags are the upstream peer-proxy flags, taken over by the filter.
type peerFlags struct {
	caFile        string
	advertiseIP   string
	advertisePort string
}

// newAPIServerCommand is app.NewAPIServerCommand() of the release, with the
// filter wired in (see run) and the built-in peer proxy forced off.
func newAPIServerCommand() *cobra.Command {
	s := options.NewServerRunOptions()
	ctx := genericapiserver.SetupSignalContext()
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)

	cmd := &cobra.Command{
		Use: "kube-apiserver",
		Long: `The Kubernetes API server validates and configures data
for the api objects which include pods, services, replicationcontrollers, and
others. The API Server services REST operations and provides the frontend to the
cluster's shared state through which all other components interact.

This build links in the peerdiscovery filter, which replaces the built-in
UnknownVersionInteroperabilityProxy (forced off).`,

		// stop printing usage when the command errors
		SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
				return err
			}
			// After the registry applied --feature-gates (and the emulation
			// version), so nothing can turn the gate back on.
			if err := disableBuiltinPeerProxy(featureGate); err != nil {
				return err
			}
			// silence client-go warnings.
			// kube-apiserver loopback clients should not log self-issued warnings.
			rest.SetDefaultWarningHandler(rest.NoWarnings{})
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			verflag.PrintAndExitIfRequested()
			fs := cmd.Flags()
			// Activate logging as soon as possible, after that
			// show flags with the final logging configuration.
			if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
				return err
			}
			cliflag.PrintFlags(fs)

			// The peer flags belong to the filter; upstream validation
			// rejects them while UnknownVersionInteroperabilityProxy is off.
			peer := peerFlags{
				caFile:        s.PeerCAFile,
				advertiseIP:   s.PeerAdvertiseAddress.PeerAdvertiseIP,
				advertisePort: s.PeerAdvertiseAddress.PeerAdvertisePort,
			}
			s.PeerCAFile = ""
			s.PeerAdvertiseAddress.PeerAdvertiseIP = ""
			s.PeerAdvertiseAddress.PeerAdvertisePort = ""

			// set default options
			completedOptions, err := s.Complete(ctx)
			if err != nil {
				return err
			}

			// validate options
			if errs := completedOptions.Validate(); len(errs) != 0 {
				return utilerrors.NewAggregate(errs)
			}
			// add feature enablement metrics
			featureGate.(featuregate.MutableFeatureGate).AddMetrics()
			// add component version metrics
			s.GenericServerRunOptions.ComponentGlobalsRegistry.AddMetrics()
			return run(ctx, completedOptions, peer)
		},
		Args: func(cmd *cobra.Command, args []string) error {
			for _, arg := range args {
				if len(arg) > 0 {
					return fmt.Errorf("%q does not take any arguments, got %q", cmd.CommandPath(), args)
				}
			}
			return nil
		},
	}
	cmd.SetContext(ctx)

	fs := cmd.Flags()
	namedFlagSets := s.Flags()
	s.Flagz = flagz.NamedFlagSetsReader{
		FlagSets: namedFlagSets,
	}
	verflag.AddFlags(namedFlagSets.FlagSet("global"))
	globalflag.AddGlobalFlags(namedFlagSets.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, f := range namedFlagSets.FlagSets {
		fs.AddFlagSet(f)
	}
	describePeerFlags(fs)

	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, namedFlagSets, cols)

	return cmd
}

// describePeerFlags rewrites the help of the peer flags, which upstream ties
// to the feature gate this binary forces off. The flags are shared with the
// named flag sets that --help prints.
func describePeerFlags(fs *pflag.FlagSet) {
	for name, usage := range map[string]string{
		"peer-ca-file": "If set, the " + filterName + " uses this file to verify serving certificates of peer kube-apiservers " +
			"when it proxies requests to them (the built-in UnknownVersionInteroperabilityProxy is off in this build).",
		"peer-advertise-ip": "If set, peer kube-apiservers proxy requests to this kube-apiserver at this IP " +
			"(published by the " + filterName + "); defaults to --advertise-address.",
		"peer-advertise-port": "If set, peer kube-apiservers proxy requests to this kube-apiserver at this port " +
			"(published by the " + filterName + "); defaults to --secure-port.",
	} {
		if f := fs.Lookup(name); f != nil {
			f.Usage = usage
		}
	}
}

// disableBuiltinPeerProxy turns the built-in UnknownVersionInteroperabilityProxy
// feature gate off. It is beta and on by default in v1.36 and v1.37, and it
// would (a) add upstream's peer proxy to the same chain as the filter as soon
// as --peer-ca-file is set, (b) run upstream's peer-endpoint lease reconciler.
// The gate is set programmatically after the registry applied the user's
// --feature-gates, so the binary's behaviour does not depend on the command
// line; explicitly asking for the gate is an error rather than silently
// ignored.
func disableBuiltinPeerProxy(fg featuregate.FeatureGate) error {
	mfg, ok := fg.(featuregate.MutableVersionedFeatureGate)
	if !ok {
		return fmt.Errorf("kube feature gate is %T, not mutable", fg)
	}
	gate := genericfeatures.UnknownVersionInteroperabilityProxy
	if mfg.ExplicitlySet(gate) && mfg.Enabled(gate) {
		return fmt.Errorf("--feature-gates=%s=true is not supported by this kube-apiserver: the %s replaces the built-in peer proxy", gate, filterName)
	}
	return mfg.SetFromMap(map[string]bool{string(gate): false})
}

// run is app.Run of the release with the filter wired in.
func run(ctx context.Context, opts options.CompletedOptions, peer peerFlags) error {
	// To help debugging, immediately log version (as app.Run does).
	logger := klog.FromContext(ctx)
	logger.Info("Version", "version", utilversion.Get())
	logger.Info("Golang settings", "GOGC", os.Getenv("GOGC"), "GOMAXPROCS", os.Getenv("GOMAXPROCS"), "GOTRACEBACK", os.Getenv("GOTRACEBACK"))

	// What app.Run of this release does before NewConfig (release.go).
	if err := prepareRun(opts); err != nil {
		return err
	}

	config, err := app.NewConfig(opts)
	if err != nil {
		return err
	}

	// The environment tunes HTTP/2 to peers as it tunes every other client
	// of kube-apiserver (DISABLE_HTTP2, HTTP2_*_SECONDS).
	peerHTTP2 := filter.PeerHTTP2FromEnvironment()
	f, err := filter.New(filter.Options{
		PeerHTTP2:           &peerHTTP2,
		PeerCAFile:          peer.caFile,
		ProxyClientCertFile: opts.ProxyClientCertFile,
		ProxyClientKeyFile:  opts.ProxyClientKeyFile,
		PeerAdvertiseIP:     peer.advertiseIP,
		PeerAdvertisePort:   peer.advertisePort,
		AdvertiseAddress:    advertiseAddress(opts),
		SecurePort:          securePort(opts),
	})
	if err != nil {
		return fmt.Errorf("%s: %w", filterName, err)
	}

	if err := followDiscovery(config, f); err != nil {
		return err
	}

	// Innermost in the aggregator chain, exactly where upstream wraps its
	// peer proxy (controlplane/apiserver.CreateAggregatorConfig, peerProxy.WrapHandler):
	// after authentication, audit, impersonation, priority and fairness and
	// authorization, before the aggregator's own handlers.
	orig := config.Aggregator.GenericConfig.BuildHandlerChainFunc
	config.Aggregator.GenericConfig.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return orig(f.WrapHandler(h, c), c)
	}

	completed, err := config.Complete()
	if err != nil {
		return err
	}
	server, err := app.CreateServerChain(completed)
	if err != nil {
		return err
	}
	server.GenericAPIServer.AddPostStartHookOrDie(filterName, f.PostStartHook)
	server.GenericAPIServer.AddPreShutdownHookOrDie(filterName, f.PreShutdownHook)
	if err := server.GenericAPIServer.AddReadyzChecks(f.ReadyzCheck()); err != nil {
		return err
	}

	prepared, err := server.PrepareRun()
	if err != nil {
		return err
	}

	return prepared.Run(ctx)
}

// followDiscovery gives the kube APIs, apiextensions and the aggregator the
// filter's wrapper of their discovery manager (one for the whole server), so
// each change of /apis, including an aggregated API's resources that no
// watch shows, reaches the filter at once instead of at its periodic read.
func followDiscovery(config *app.Config, f *filter.Filter) error {
	kube := &config.KubeAPIs.ControlPlane.Generic.AggregatedDiscoveryGroupManager
	apiExtensions := &config.ApiExtensions.GenericConfig.AggregatedDiscoveryGroupManager
	aggregator := &config.Aggregator.GenericConfig.AggregatedDiscoveryGroupManager
	if *kube == nil {
		return nil
	}
	if *apiExtensions != *kube || *aggregator != *kube {
		return fmt.Errorf("%s: the kube APIs, apiextensions and the aggregator do not share one discovery manager", filterName)
	}
	rm := f.WrapDiscoveryManager(*kube)
	*kube, *apiExtensions, *aggregator = rm, rm, rm
	return nil
}

// advertiseAddress is --advertise-address after completion (defaulted from
// --bind-address or the host's default interface), "" if still unset.
func advertiseAddress(opts options.CompletedOptions) string {
	if ip := opts.GenericServerRunOptions.AdvertiseAddress; ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	return ""
}

// securePort is the port kube-apiserver serves on: the listener's if one
// was created already, else --secure-port.
func securePort(opts options.CompletedOptions) int {
	if opts.SecureServing == nil {
		return 0
	}
	if l := opts.SecureServing.Listener; l != nil {
		if _, p, err := net.SplitHostPort(l.Addr().String()); err == nil {
			if n, err := strconv.Atoi(p); err == nil {
				return n
			}
		}
	}
	return opts.SecureServing.BindPort
}

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

// Package plugin is the kubectl plugin kubectl-peerdiscovery: flags,
// clients and output around pkg/adminview, which computes the answers.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"sigs.k8s.io/peerdiscovery/pkg/adminview"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// Streams are the plugin's standard streams.
type Streams struct {
	Out, ErrOut io.Writer
}

type options struct {
	streams   Streams
	loading   *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
	output    string
	color     string
	now       func() time.Time
}

// NewCommand is `kubectl peerdiscovery` and its subcommands.
func NewCommand(streams Streams) *cobra.Command {
	o := &options{streams: streams, loading: clientcmd.NewDefaultClientConfigLoadingRules(), now: time.Now}
	cmd := &cobra.Command{
		Use:   "kubectl-peerdiscovery",
		Short: "What peerdiscovery does with requests on a mixed-version control plane",
		Long: `kubectl peerdiscovery answers the questions of a control-plane upgrade from the
peerdiscovery.k8s.io objects, with the same routing rule as the filter inside
each kube-apiserver:

  status    the servers, the GVRs not served by all of them, and where requests go
  explain   what happens to one request, and why
  drain     what would break, and what would fail over, if servers went away now`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl peerdiscovery"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.CompletionOptions.DisableDefaultCmd = true
	fs := cmd.PersistentFlags()
	fs.StringVar(&o.loading.ExplicitPath, "kubeconfig", "", "Path to the kubeconfig file to use.")
	flags := clientcmd.RecommendedConfigOverrideFlags("")
	flags.ClusterOverrideFlags.InsecureSkipTLSVerify = clientcmd.FlagInfo{} // no flag to turn verification off
	clientcmd.BindOverrideFlags(&o.overrides, fs, flags)
	fs.StringVarP(&o.output, "output", "o", "", "Output format: text (default), json or yaml.")
	fs.StringVar(&o.color, "color", "auto", "Colors: auto (when the output is a terminal and NO_COLOR is unset), always or never.")
	cmd.AddCommand(o.statusCommand(), o.explainCommand(), o.drainCommand())
	return cmd
}

func (o *options) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Servers, version skew (GVRs × servers) and what is proxied where",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, peers, tables, err := o.read(cmd.Context(), true)
			if err != nil {
				return err
			}
			st := adminview.NewStatus(peers, tables)
			return o.print(st, func(w io.Writer, color bool) error { return adminview.WriteStatus(w, st, o.now(), color) })
		},
	}
}

func (o *options) explainCommand() *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "explain VERB PATH",
		Short: "What happens to one request, and why (a RouteReview)",
		Example: `  kubectl peerdiscovery explain list /apis/storagemigration.k8s.io/v1beta1/storageversionmigrations --from apiserver-abc
  kubectl peerdiscovery explain create /apis/apps/v1/namespaces/default/deployments`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			verb, err := reviewVerb(args[0])
			if err != nil {
				return err
			}
			path := args[1]
			if !strings.HasPrefix(path, "/") {
				return fmt.Errorf("PATH %q must start with /, as in /apis/apps/v1/deployments", path)
			}
			client, peers, _, err := o.read(cmd.Context(), false)
			if err != nil {
				return err
			}
			servers := adminview.Servers(peers)
			var source *adminview.Server
			spec := v1alpha1.RouteReviewSpec{Verb: verb, Path: path}
			if from != "" {
				found, err := adminview.Resolve(servers, from)
				if err != nil {
					return err
				}
				source, spec.SourcePeer = &found[0], found[0].ServerID
			}
			r, err := client.PeerdiscoveryV1alpha1().RouteReviews().Create(cmd.Context(), &v1alpha1.RouteReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				return explainAPIError(err, "create routereviews.peerdiscovery.k8s.io")
			}
			e := adminview.NewExplain(verb, path, source, servers, r.Status)
			return o.print(e, func(w io.Writer, color bool) error { return adminview.WriteExplain(w, e, color) })
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "The kube-apiserver the request lands on (APIServerPeer name or server ID); default: one that serves only what every server serves.")
	return cmd
}

// reviewVerb is arg as a RouteReview takes it: a Kubernetes verb (get,
// list, ...) or an HTTP method (GET, HEAD, ...), in any case.
func reviewVerb(arg string) (string, error) {
	verbs := routing.ReviewVerbs()
	for _, v := range []string{strings.ToLower(arg), strings.ToUpper(arg)} {
		if slices.Contains(verbs, v) {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown verb %q; one of: %s", arg, strings.Join(verbs, ", "))
}

func (o *options) drainCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "drain SERVER [SERVER...]",
		Short: "What if these servers went away now: GVRs left without a ready server (503), and GVRs that fail over",
		Long: `drain changes nothing. It answers the question before each step of a rolling
upgrade: if these kube-apiservers stopped now, which GVRs would no ready server
serve any more (requests for them get 503 until a server serving them is back),
and which proxied GVRs would move to another server. It decides with the
filter's own rule, from the routing tables, as if the servers had shut down.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, peers, tables, err := o.read(cmd.Context(), true)
			if err != nil {
				return err
			}
			d, err := adminview.NewDrain(peers, tables, args)
			if err != nil {
				return err
			}
			return o.print(d, func(w io.Writer, color bool) error { return adminview.WriteDrain(w, d, color) })
		},
	}
}

// read connects and lists the APIServerPeers (and the PeerRoutingTables).
func (o *options) read(ctx context.Context, withTables bool) (versioned.Interface, []v1alpha1.APIServerPeer, []v1alpha1.PeerRoutingTable, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loading, &o.overrides).ClientConfig()
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.UserAgent = "kubectl-peerdiscovery"
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	api := client.PeerdiscoveryV1alpha1()
	peers, err := api.APIServerPeers().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, nil, explainAPIError(err, "list apiserverpeers.peerdiscovery.k8s.io")
	}
	if !withTables {
		return client, peers.Items, nil, nil
	}
	tables, err := api.PeerRoutingTables().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, nil, explainAPIError(err, "list peerroutingtables.peerdiscovery.k8s.io")
	}
	return client, peers.Items, tables.Items, nil
}

// explainAPIError turns the errors an admin meets first into what to do.
func explainAPIError(err error, action string) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("this cluster does not serve peerdiscovery.k8s.io/v1alpha1 (%s: %w): peerdiscovery is not installed here; see docs/operations.md, or `kubectl get apiservice v1alpha1.peerdiscovery.k8s.io`", action, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("you may not %s (%w): an admin can grant it with the ClusterRole peerdiscovery-reader (part of the built-in view role), e.g. `kubectl create clusterrolebinding peerdiscovery-reader-$USER --clusterrole=peerdiscovery-reader --user=<you>`", action, err)
	case apierrors.IsServiceUnavailable(err):
		return fmt.Errorf("peerdiscovery.k8s.io is installed but unavailable (%s: %w): no ready peerdiscovery-apiserver behind `kubectl get apiservice v1alpha1.peerdiscovery.k8s.io`", action, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the cluster did not accept your credentials (%s: %w)", action, err)
	}
	return fmt.Errorf("%s: %w", action, err)
}

func (o *options) print(report any, text func(io.Writer, bool) error) error {
	switch o.output {
	case "", "text":
		color, err := o.useColor()
		if err != nil {
			return err
		}
		return text(o.streams.Out, color)
	case "json":
		data, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.streams.Out, "%s\n", data)
		return err
	case "yaml":
		data, err := yaml.Marshal(report)
		if err != nil {
			return err
		}
		_, err = o.streams.Out.Write(data)
		return err
	}
	return fmt.Errorf("unknown output format %q: text, json or yaml", o.output)
}

func (o *options) useColor() (bool, error) {
	switch o.color {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto":
		f, ok := o.streams.Out.(*os.File)
		return ok && term.IsTerminal(int(f.Fd())) && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb", nil
	}
	return false, errors.New("--color must be auto, always or never")
}

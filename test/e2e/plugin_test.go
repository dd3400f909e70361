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

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/adminview"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

var (
	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error
)

// plugin runs `kubectl peerdiscovery ARGS` with the real kubectl, the
// plugin installed by putting its binary on PATH, as an admin would.
func plugin(t *testing.T, args ...string) (string, error) {
	t.Helper()
	pluginOnce.Do(func() {
		pluginDir, pluginErr = os.MkdirTemp("", "peerdiscovery-plugin-")
		if pluginErr != nil {
			return
		}
		build := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "kubectl-peerdiscovery"), "./cmd/kubectl-peerdiscovery")
		build.Dir = cluster.RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			pluginErr = fmt.Errorf("building the plugin: %w: %s", err, out)
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	cmd := exec.Command(cluster.KubectlBinary(), append(append([]string{"peerdiscovery"}, args...), "--kubeconfig", cluster.Kubeconfig())...)
	cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl peerdiscovery %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func pluginJSON(t *testing.T, into any, args ...string) {
	t.Helper()
	out, err := plugin(t, append(args, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), into); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// TestKubectlPlugin checks status, explain and drain on the real control
// plane against the routing tables (and RouteReview) read with client-go.
func TestKubectlPlugin(t *testing.T) {
	ids := readyPlane(t)
	servers := cluster.Servers()

	tables, err := pd(t, new1).PeerdiscoveryV1alpha1().PeerRoutingTables().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What the tables say, for every check below.
	skew := map[string]bool{}
	onlyNew := map[string]bool{}   // served by v1.37.2 servers only
	onlyOld := map[string]bool{}   // served by the v1.36.3 server only
	onBothNew := map[string]bool{} // not by the old one, by both new ones
	for _, pt := range tables.Items {
		gvr := routing.GVRString(schema.GroupVersionResource{Group: pt.Spec.Group, Version: pt.Spec.Version, Resource: pt.Spec.Resource})
		if pt.Status.ServedByAll || pt.Status.ClusterWide {
			continue
		}
		skew[gvr] = true
		listed := map[string]bool{}
		for _, p := range pt.Status.Peers {
			if !p.Left {
				listed[p.ServerID] = true
			}
		}
		if !listed[ids[old]] {
			onlyNew[gvr] = true
			if listed[ids[new1]] && listed[ids[new2]] {
				onBothNew[gvr] = true
			}
		}
		if listed[ids[old]] && !listed[ids[new1]] && !listed[ids[new2]] {
			onlyOld[gvr] = true
		}
	}
	if !skew["storagemigration.k8s.io/v1/storageversionmigrations"] || !onlyNew["certificates.k8s.io/v1/certificatesigningrequests"] {
		t.Fatalf("the skew lacks the v1.37-only and the turned-off APIs: %v", slices.Sorted(maps.Keys(skew)))
	}

	t.Run("status", func(t *testing.T) {
		// Through every server the same answer: the plugin reads the
		// cluster's state, not the server it happens to reach.
		var first []adminview.SkewRow
		for i, s := range servers {
			var st adminview.Status
			pluginJSON(t, &st, "status", "--context", s.Context)
			got := map[string]bool{}
			for _, r := range st.Skew {
				got[r.GVR] = true
			}
			if !maps.Equal(got, skew) {
				t.Fatalf("status through %s: skew %v, tables %v", s.Name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(skew)))
			}
			col := map[string]int{}
			for c, srv := range st.Servers {
				col[srv.ServerID] = c
			}
			for _, r := range st.Skew {
				oldCell, new1Cell := r.Cells[col[ids[old]]], r.Cells[col[ids[new1]]]
				if onBothNew[r.GVR] && (oldCell.Decision != v1alpha1.RouteProxy || (oldCell.To != ids[new1] && oldCell.To != ids[new2]) || new1Cell.Decision != v1alpha1.RouteLocal) {
					t.Errorf("%s: old %+v, new %+v", r.GVR, oldCell, new1Cell)
				}
			}
			if i == 0 {
				first = st.Skew
			} else if fmt.Sprint(st.Skew) != fmt.Sprint(first) {
				t.Errorf("status through %s differs from through %s", s.Name, servers[0].Name)
			}
		}
		out, err := plugin(t, "status")
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("SKEW  %d of %d GVRs are not served by every server", len(skew), len(tables.Items)); !strings.Contains(out, want) || strings.Contains(out, "\x1b") {
			t.Errorf("plain status lacks %q (or has colors):\n%s", want, out)
		}
		t.Logf("kubectl peerdiscovery status:\n%s", out)
	})

	t.Run("explain", func(t *testing.T) {
		var e adminview.Explain
		pluginJSON(t, &e, "explain", "list", svmPath, "--from", ids[old])
		want := review(t, new1, "list", svmPath, ids[old])
		if e.Review.Decision != v1alpha1.RouteProxy || e.Review.Target != want.Target || e.From == nil || e.From.Version != "v1.36.3" {
			t.Fatalf("explain: %+v, RouteReview %+v", e, want)
		}
		out, err := plugin(t, "explain", "list", svmPath, "--from", ids[old])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "is proxied to "+want.Target+" (v1.37.2)") || !strings.Contains(out, "in the order tried") {
			t.Errorf("explain text:\n%s", out)
		}
		pluginJSON(t, &e, "explain", "create", svmPath, "--from", ids[new1])
		if e.Review.Decision != v1alpha1.RouteLocal {
			t.Errorf("create on v1.37.2: %+v", e.Review)
		}
	})

	t.Run("drain", func(t *testing.T) {
		var d adminview.Drain
		// Both v1.37.2 servers: exactly what only they serve goes 503.
		pluginJSON(t, &d, "drain", "v1.37.2")
		if got := drainGVRs(d.Unavailable); !maps.Equal(got, onlyNew) || len(d.FailOver) != 0 || len(d.Drained) != 2 {
			t.Errorf("drain v1.37.2: 503 for %v (want %v), fail over %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(onlyNew)), d.FailOver)
		}
		for _, r := range d.Unavailable {
			if len(r.Moves) != 1 || r.Moves[0].Server != ids[old] || r.Moves[0].To != "" {
				t.Errorf("drain v1.37.2, %s: %+v", r.GVR, r.Moves)
			}
		}
		// The old server: nothing only it serves.
		pluginJSON(t, &d, "drain", "v1.36.3")
		if got := drainGVRs(d.Unavailable); !maps.Equal(got, onlyOld) || len(onlyOld) != 0 || len(d.FailOver) != 0 {
			t.Errorf("drain v1.36.3: 503 for %v, fail over %v", slices.Sorted(maps.Keys(got)), d.FailOver)
		}
		// One new server: what the old one proxies fails over to the other.
		pluginJSON(t, &d, "drain", ids[new1])
		if got := drainGVRs(d.FailOver); len(d.Unavailable) != 0 || !maps.Equal(got, onBothNew) {
			t.Errorf("drain %s: 503 %v, fail over %v (want %v)", ids[new1], d.Unavailable, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(onBothNew)))
		}
		for _, r := range d.FailOver {
			if !slices.Equal(r.Moves, []adminview.Move{{Server: ids[old], To: ids[new2]}}) {
				t.Errorf("drain %s, %s: %+v", ids[new1], r.GVR, r.Moves)
			}
		}
		out, err := plugin(t, "drain", "v1.37.2")
		if err != nil || !strings.Contains(out, fmt.Sprintf("503  %d GVRs would have no ready server left", len(onlyNew))) {
			t.Errorf("drain text: %v\n%s", err, out)
		}
		if _, err := plugin(t, "drain", "no-such-server"); err == nil || !strings.Contains(err.Error(), `unknown server "no-such-server"; known servers:`) {
			t.Errorf("unknown server: %v", err)
		}
	})

	t.Run("rbac", func(t *testing.T) {
		// No role at all: a clear error naming the missing permission.
		_, err := plugin(t, "status", "--as", "peerdiscovery-e2e-nobody")
		if err == nil || !strings.Contains(err.Error(), "you may not list apiserverpeers.peerdiscovery.k8s.io") || !strings.Contains(err.Error(), "peerdiscovery-reader") {
			t.Fatalf("no RBAC: %v", err)
		}
		// The built-in view role is enough (peerdiscovery-reader
		// aggregates into it), RouteReview included.
		admin := planetest.Kube(t, cluster.AdminConfig(new1))
		_, err = admin.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "peerdiscovery-e2e-plugin-viewer"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "peerdiscovery-e2e-viewer"}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), "peerdiscovery-e2e-plugin-viewer", metav1.DeleteOptions{})
		})
		planetest.WaitFor(t, time.Minute, "a viewer runs the plugin", func() error {
			if _, err := plugin(t, "status", "--as", "peerdiscovery-e2e-viewer"); err != nil {
				return err
			}
			_, err := plugin(t, "explain", "get", svmPath, "--as", "peerdiscovery-e2e-viewer")
			return err
		})
	})
}

func drainGVRs(rows []adminview.DrainRow) map[string]bool {
	out := map[string]bool{}
	for _, r := range rows {
		out[r.GVR] = true
	}
	return out
}

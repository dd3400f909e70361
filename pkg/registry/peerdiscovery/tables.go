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

package peerdiscovery

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metatable "k8s.io/apimachinery/pkg/api/meta/table"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
)

// rowFunc returns the cells after Name for one object; age is the last cell.
type rowFunc func(obj runtime.Object, age string) ([]interface{}, error)

// tableConvertor renders server-side Tables (what kubectl get asks for) with
// the apimachinery table helpers.
type tableConvertor struct {
	columns []metav1.TableColumnDefinition
	row     rowFunc
}

// tableOf is the tableConvertor of kind T: row gives the cells after Name
// of one T.
func tableOf[T runtime.Object](columns []metav1.TableColumnDefinition, row func(obj T, age string) []interface{}) tableConvertor {
	return tableConvertor{columns: columns, row: func(obj runtime.Object, age string) ([]interface{}, error) {
		o, ok := obj.(T)
		if !ok {
			return nil, fmt.Errorf("not a %T: %T", *new(T), obj)
		}
		return row(o, age), nil
	}}
}

var _ rest.TableConvertor = tableConvertor{}

func (c tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{}
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		table.ColumnDefinitions = c.columns
	}
	rows, err := metatable.MetaToTableRow(obj, func(o runtime.Object, _ metav1.Object, name, age string) ([]interface{}, error) {
		cells, err := c.row(o, age)
		if err != nil {
			return nil, err
		}
		return append([]interface{}{name}, cells...), nil
	})
	if err != nil {
		return nil, err
	}
	table.Rows = rows
	if l, err := meta.ListAccessor(obj); err == nil {
		table.ResourceVersion = l.GetResourceVersion()
		table.Continue = l.GetContinue()
	} else if m, err := meta.Accessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	return table, nil
}

var objectMetaDoc = metav1.ObjectMeta{}.SwaggerDoc()

func col(name, typ, desc string, priority int32) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: typ, Description: desc, Priority: priority}
}

func nameCol() metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: objectMetaDoc["name"]}
}

func ageCol() metav1.TableColumnDefinition {
	return col("Age", "string", objectMetaDoc["creationTimestamp"], 0)
}

func groupDisplay(g string) string {
	if g == "" {
		return "core"
	}
	return g
}

// routingTableTable renders routing tables. Readiness is not stored in
// them (it is on each APIServerPeer); the Ready and Peers columns show it
// as the last published view has it when the table is rendered.
func routingTableTable(view viewSource) tableConvertor {
	return tableOf(
		[]metav1.TableColumnDefinition{
			nameCol(),
			col("Group", "string", "API group (core for the legacy group).", 0),
			col("Version", "string", "API version.", 0),
			col("Resource", "string", "Resource.", 0),
			col("Ready", "string", "Ready peers serving it / every known peer; readiness from the APIServerPeers when this table is rendered (not a stored field).", 0),
			col("Served-By-All", "boolean", "Every known peer serves it: never proxied.", 0),
			col("Cluster-Wide", "boolean", "A CRD or aggregated APIService: never proxied.", 0),
			ageCol(),
			col("Peers", "string", "Peers serving it (* marks ready, as the Ready column).", 1),
		},
		func(t *api.PeerRoutingTable, age string) []interface{} {
			ready := readyPeers(view, schema.GroupVersionResource{Group: t.Spec.Group, Version: t.Spec.Version, Resource: t.Spec.Resource})
			peers := make([]string, 0, len(t.Status.Peers))
			n := 0
			for _, p := range t.Status.Peers {
				if ready[p.ServerID] {
					peers = append(peers, p.ServerID+"*")
					n++
				} else {
					peers = append(peers, p.ServerID)
				}
			}
			return []interface{}{
				groupDisplay(t.Spec.Group), t.Spec.Version, t.Spec.Resource,
				fmt.Sprintf("%d/%d", n, t.Status.TotalPeers),
				t.Status.ServedByAll, t.Status.ClusterWide, age, strings.Join(peers, ","),
			}
		},
	)
}

// readyPeers are the ready proxy targets of gvr in the last view, by
// server ID.
func readyPeers(view viewSource, gvr schema.GroupVersionResource) map[string]bool {
	v, _, _ := view.Routing()
	if v == nil {
		return nil
	}
	route := v.Table.Lookup(gvr)
	if route == nil {
		return nil
	}
	ready := make(map[string]bool, len(route.Peers))
	for _, p := range route.Peers {
		ready[p.ID] = p.Ready
	}
	return ready
}

var peerTable = tableOf(
	[]metav1.TableColumnDefinition{
		nameCol(),
		col("Endpoint", "string", "host:port peers use to reach it.", 0),
		col("Version", "string", "Binary version.", 0),
		col("Ready", "string", "Whether requests may be proxied to it.", 0),
		col("GVRs", "integer", "Group/version/resources it serves.", 0),
		col("Last-Sync", "string", "Time since its discovery was last read.", 0),
		ageCol(),
		col("Sources", "string", "Where it was learned from.", 1),
		col("Reason", "string", "Reason of the Ready condition.", 1),
	},
	func(p *api.APIServerPeer, age string) []interface{} {
		ready, reason := "Unknown", ""
		for _, c := range p.Status.Conditions {
			if c.Type == api.ConditionReady {
				ready, reason = string(c.Status), c.Reason
			}
		}
		lastSync := "<never>"
		if p.Status.LastSyncTime != nil {
			lastSync = metatable.ConvertToHumanReadableDateType(*p.Status.LastSyncTime)
		}
		sources := make([]string, 0, len(p.Spec.Sources))
		for _, s := range p.Spec.Sources {
			sources = append(sources, string(s))
		}
		return []interface{}{
			p.Spec.Endpoint, p.Spec.BinaryVersion, ready, int64(p.Status.ResourceCount),
			lastSync, age, strings.Join(sources, ","), reason,
		}
	},
)

var discoveryTable = tableOf(
	[]metav1.TableColumnDefinition{
		nameCol(),
		col("Groups", "integer", "Groups in the merged /api and /apis.", 0),
		col("Peers", "integer", "Peers merged.", 0),
		col("ETag", "string", "Start of the /apis ETag.", 0),
		ageCol(),
	},
	func(d *api.PeerAggregatedDiscovery, age string) []interface{} {
		etag := d.Status.APIs.ETag
		if len(etag) > 12 {
			etag = etag[:12]
		}
		return []interface{}{
			int64(len(d.Status.API.Items) + len(d.Status.APIs.Items)),
			int64(len(d.Status.Sources)), etag, age,
		}
	},
)

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
	"slices"
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
)

// TestTableConversion: what `kubectl get` shows for each resource, for a
// list and for one object, with and without headers.
func TestTableConversion(t *testing.T) {
	v := newTestView(t)
	ctx := context.Background()
	publish(t, v, testOutput(false))
	cases := []struct {
		resource, name string
		columns        []string
		row            []interface{} // the cells of name's row, but Age
	}{{
		resource: "peerroutingtables", name: "deviceclasses.v1beta2.resource.k8s.io",
		columns: []string{"Name", "Group", "Version", "Resource", "Ready", "Served-By-All", "Cluster-Wide", "Age", "Peers"},
		row:     []interface{}{"deviceclasses.v1beta2.resource.k8s.io", "resource.k8s.io", "v1beta2", "deviceclasses", "1/1", false, false, nil, "a*"},
	}, {
		resource: "peerroutingtables", name: "pods.v1.core",
		columns: []string{"Name", "Group", "Version", "Resource", "Ready", "Served-By-All", "Cluster-Wide", "Age", "Peers"},
		row:     []interface{}{"pods.v1.core", "core", "v1", "pods", "1/2", true, false, nil, "a*,b"},
	}, {
		resource: "apiserverpeers", name: "b",
		columns: []string{"Name", "Endpoint", "Version", "Ready", "GVRs", "Last-Sync", "Age", "Sources", "Reason"},
		row:     []interface{}{"b", "b.example:6443", "v1.37.2", "False", int64(2), nil, nil, "RegistrationLease", "Test"},
	}, {
		resource: "peeraggregateddiscoveries", name: "cluster",
		columns: []string{"Name", "Groups", "Peers", "ETag", "Age"},
		row:     []interface{}{"cluster", int64(0), int64(0), "", nil},
	}}
	for _, tc := range cases {
		t.Run(tc.resource+"/"+tc.name, func(t *testing.T) {
			s := storageOf(t, v, tc.resource)
			conv, ok := s.(rest.TableConvertor)
			if !ok {
				t.Fatalf("%T converts no tables", s)
			}
			list, err := s.List(ctx, &metainternalversion.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			table, err := conv.ConvertToTable(ctx, list, nil)
			if err != nil {
				t.Fatal(err)
			}
			var cols []string
			for _, c := range table.ColumnDefinitions {
				cols = append(cols, c.Name)
				if c.Description == "" {
					t.Errorf("column %s has no description", c.Name)
				}
			}
			if !slices.Equal(cols, tc.columns) {
				t.Fatalf("columns %v, want %v", cols, tc.columns)
			}
			if table.ResourceVersion == "" {
				t.Error("a list's table has no resourceVersion")
			}
			i := slices.IndexFunc(table.Rows, func(r metav1.TableRow) bool { return r.Cells[0] == tc.name })
			if i < 0 {
				t.Fatalf("no row for %s in %v", tc.name, table.Rows)
			}
			cells := table.Rows[i].Cells
			if len(cells) != len(tc.row) {
				t.Fatalf("cells %v, want %d", cells, len(tc.row))
			}
			for j, want := range tc.row {
				if want != nil && cells[j] != want {
					t.Errorf("cell %s = %#v, want %#v", tc.columns[j], cells[j], want)
				}
			}

			obj, err := s.Get(ctx, tc.name, &metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			one, err := conv.ConvertToTable(ctx, obj, &metav1.TableOptions{NoHeaders: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(one.ColumnDefinitions) != 0 || len(one.Rows) != 1 || one.Rows[0].Cells[0] != tc.name {
				t.Fatalf("one object without headers: %d columns, rows %v", len(one.ColumnDefinitions), one.Rows)
			}
		})
	}
}

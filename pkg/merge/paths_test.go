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

package merge

import (
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

func TestPeerGroupsFromPaths(t *testing.T) {
	api := []apidiscoveryv2.APIGroupDiscovery{grp("", ver("v1", res("pods", "get")))}
	apis := []apidiscoveryv2.APIGroupDiscovery{grp("apps", ver("v1")), grp("batch", ver("v1")), grp("apps", ver("v2"))}
	got := PeerGroupsFromPaths(api, apis)
	if s := shape(got); s != "apps{v1[] } batch{v1[] } " {
		t.Errorf("got %s", s)
	}
}

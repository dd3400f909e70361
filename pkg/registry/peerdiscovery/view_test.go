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
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The peer engine names its Events' objects with PeerUID: it must be the
// UID the stored APIServerPeer has, or kubectl describe finds no Events.
func TestPeerUIDIsTheStoredUID(t *testing.T) {
	v := newTestView(t)
	publish(t, v, testOutput(true))
	obj, err := storageOf(t, v, "apiserverpeers").Get(context.Background(), "a", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	accessor, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.PeerUID("a"); accessor.GetUID() == "" || got != accessor.GetUID() {
		t.Errorf("PeerUID(a) = %q, the stored object's UID is %q", got, accessor.GetUID())
	}
}

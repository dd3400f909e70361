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

package memstore

import (
	"context"
	"strconv"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestTestTypesAreRuntimeObjects(t *testing.T) {
	s := newTestScheme()
	for _, o := range []runtime.Object{&Widget{}, &WidgetList{}, &RouteTable{}, &RouteTableList{}} {
		if _, _, err := s.ObjectKinds(o); err != nil {
			t.Errorf("%T: %v", o, err)
		}
	}
}

func TestEpochs(t *testing.T) {
	for range 50 {
		s := New(Config{NewFunc: widgetConfig().NewFunc, NewListFunc: widgetConfig().NewListFunc})
		s.Stop()
		if e := s.epoch; e == 0 || e > epochMask {
			t.Fatalf("epoch %d outside 1..2^30-1", e)
		}
		if rv := s.ResourceVersion(); epochOf(rv) != s.epoch || uint32(rv) != 0 {
			t.Fatalf("initial resourceVersion %d is not epoch<<32", rv)
		}
	}
	s := newWidgetStore(t, nil)
	prev := s.ResourceVersion()
	for i := range 100 {
		mustReplace(t, s, objs(wid("a", strconv.Itoa(i))))
		rv := s.ResourceVersion()
		if rv <= prev || epochOf(rv) != testEpoch || rv>>62 != 0 {
			t.Fatalf("rv %d after %d: not monotonic, of another epoch, or not below 2^62", rv, prev)
		}
		prev = rv
	}
}

// Another store's resourceVersions (another replica's, or an earlier run's:
// another epoch) are 410 Gone everywhere a resourceVersion is read, never
// a point in this store's history.
func TestForeignResourceVersionIsGone(t *testing.T) {
	a := newWidgetStore(t, nil)
	b := newWidgetStore(t, func(c *Config) { c.Epoch = otherEpoch })
	for _, s := range []*Store{a, b} {
		mustReplace(t, s, objs(wid("x", "red")))
		mustReplace(t, s, objs(wid("x", "blue")))
	}
	foreign := strconv.FormatUint(b.ResourceVersion()-1, 10)
	ctx := context.Background()
	_, errGet := a.Get(ctx, "x", &metav1.GetOptions{ResourceVersion: foreign})
	_, errList := a.List(ctx, &metainternalversion.ListOptions{ResourceVersion: foreign})
	_, errExact := a.List(ctx, &metainternalversion.ListOptions{ResourceVersion: foreign, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	_, errWatch := a.Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: foreign})
	for what, err := range map[string]error{"get": errGet, "list": errList, "exact list": errExact, "watch": errWatch} {
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Errorf("%s from another store's resourceVersion: %v, want 410", what, err)
		}
	}
}

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

package engine

import (
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
)

// SetEventGate makes the engine emit Events only while emit returns true
// (e.g. only on the leader replica, so that N replicas do not record every
// transition N times); nil emits always. Safe to call while Run runs.
func (e *Engine) SetEventGate(emit func() bool) {
	if emit == nil {
		e.eventGate.Store(nil)
		return
	}
	e.eventGate.Store(&emit)
}

// startRecording sends Events to the API until stop is called. Run calls
// it, so an engine that is built but never run holds no goroutine. A
// recorder set before (tests) is kept; without a Kube client there is none.
func (e *Engine) startRecording() (stop func()) {
	if e.recorder != nil || e.clients.Kube == nil {
		return func() {}
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.clients.Kube.CoreV1().Events("")})
	host, _ := os.Hostname()
	e.recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "peerdiscovery-apiserver", Host: host})
	return b.Shutdown
}

func (e *Engine) event(p *peerState, typ, reason, format string, args ...interface{}) {
	if e.recorder == nil {
		return
	}
	if gate := e.eventGate.Load(); gate != nil && !(*gate)() {
		return
	}
	// kubectl describe finds Events by involvedObject kind, name, namespace
	// (empty: the object is cluster-scoped) and UID, so the reference
	// carries the UID the store gives the object.
	name := compute.PeerName(p.ServerID)
	ref := &corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "APIServerPeer", Name: name}
	if e.peerUID != nil {
		ref.UID = e.peerUID(name)
	}
	e.recorder.Eventf(ref, typ, reason, format, args...)
}

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

package peerlease

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// A server that shuts down gracefully does not delete its registration
// Lease: it records when it departed, so that every replica of the engine,
// including one started later, dates the departure the same way.
const (
	// DepartedAtAnnotation is the departure time, RFC 3339 in UTC.
	DepartedAtAnnotation = "peerdiscovery.k8s.io/departed-at"
)

// MarkDeparted returns a copy of a registration Lease that records a
// graceful departure at the given time. served (from EncodeServed), when
// not empty, replaces the recorded list; empty keeps it. The renewal time
// is left alone: the Lease stops counting as live because of the
// annotation, not because it lapses.
func MarkDeparted(l *coordinationv1.Lease, at time.Time, served string) *coordinationv1.Lease {
	l = l.DeepCopy()
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[DepartedAtAnnotation] = at.UTC().Format(time.RFC3339)
	if served != "" {
		l.Annotations[ServedResourcesAnnotation] = served
	}
	return l
}

// parseDeparted reads the departure time of a Lease; zero when absent.
func parseDeparted(l *coordinationv1.Lease) (time.Time, error) {
	raw, ok := l.Annotations[DepartedAtAnnotation]
	if !ok {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		return time.Time{}, fmt.Errorf("annotation %s: %q is not an RFC 3339 time", DepartedAtAnnotation, clip(raw))
	}
	if t.IsZero() {
		return time.Time{}, fmt.Errorf("annotation %s: zero time", DepartedAtAnnotation)
	}
	return t.UTC(), nil
}

// GoneSince is when a registration Lease stopped counting as live: its
// departure or its lapse, whichever came first. It reads any Lease, broken
// or not (a malformed departure time is ignored), so that garbage
// collection can judge every Lease it owns.
func GoneSince(l *coordinationv1.Lease) time.Time {
	_, expires := lapse(l, 0)
	var departed time.Time
	if raw, ok := l.Annotations[DepartedAtAnnotation]; ok {
		departed, _ = time.Parse(time.RFC3339, raw)
	}
	return goneAt(departed, expires)
}

func goneAt(departed, expires time.Time) time.Time {
	if !departed.IsZero() && departed.Before(expires) {
		return departed
	}
	return expires
}

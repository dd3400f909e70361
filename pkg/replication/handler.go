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

package replication

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
)

const (
	// FromParam is the follower's resourceVersion: the leader replays the
	// changes after it when it still has them, else sends a snapshot.
	FromParam = "from"
	// ProgressInterval is the leader's heartbeat on an idle stream.
	ProgressInterval = 5 * time.Second
	// subscriberBuffer is how many batches a follower may fall behind
	// before its stream is ended (it reconnects from a snapshot). Batches
	// are one per store per publish, so this is minutes of changes.
	subscriberBuffer = 256
)

// Handler serves the replication stream of a leading clock. On a replica
// that does not lead it answers 503, and the follower asks again (the
// election tells it who leads).
type Handler struct {
	Clock *memstore.Clock
	// Progress is the heartbeat interval; 0 means ProgressInterval.
	Progress time.Duration
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	var from uint64
	if v := r.URL.Query().Get(FromParam); v != "" {
		var err error
		if from, err = strconv.ParseUint(v, 10, 64); err != nil {
			http.Error(w, FromParam+" must be a resourceVersion", http.StatusBadRequest)
			return
		}
	}
	start, sub, err := h.Clock.Subscribe(from, subscriberBuffer)
	if errors.Is(err, memstore.ErrNotLeading) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "this replica does not lead", http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer sub.Close()
	first, err := encodeStart(start)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	logger := klog.FromContext(r.Context()).WithValues("follower", r.RemoteAddr)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	if err := enc.Encode(first); err != nil {
		return
	}
	flusher.Flush()
	logger.V(2).Info("Replication stream started", "from", from, "resourceVersion", start.Timeline.Current, "snapshot", start.Snapshot != nil)

	every := h.Progress
	if every <= 0 {
		every = ProgressInterval
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		var f frame
		select {
		case <-r.Context().Done():
			return
		case b, ok := <-sub.Batches():
			if !ok {
				// Fell behind, or this replica stopped leading.
				logger.V(1).Info("Replication stream ended by the leader")
				return
			}
			wb, err := encodeBatch(b)
			if err != nil {
				logger.Error(err, "Ending the replication stream")
				return
			}
			f.Batch = wb
		case <-tick.C:
			f.Progress = &wireProgress{Current: h.Clock.Current()}
		}
		if err := enc.Encode(f); err != nil {
			return
		}
		flusher.Flush()
	}
}

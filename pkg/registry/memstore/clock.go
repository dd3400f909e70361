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
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const (
	epochBits   = 30
	counterBits = 32
	epochMask   = 1<<epochBits - 1

	// maxPastEpochs bounds the timeline: an RV of an older epoch is 410.
	maxPastEpochs = 16
)

// epochBase is the zero of time-based epochs: 2^30 seconds later (2059) the
// epoch would wrap, which epochAt refuses loudly.
var epochBase = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock hands out resourceVersions shared by all stores of one process, and
// orders their changes.
//
// A resourceVersion is epoch<<32 | counter. Each elected leader starts a
// new epoch (Promote), greater than every epoch it knows of and at least
// the time in seconds since 2025, so that a leader elected after all
// replicas restarted does not reuse its predecessor's epoch (the election
// Lease keeps two leaders from being promoted in the same second). Replicas that follow a
// leader (Restore, Apply) adopt its resourceVersions verbatim, so an RV is
// valid on every replica that has seen it. The timeline is the list of
// epochs a clock has seen, each with the last counter seen in it: an RV of
// an epoch not on it, or beyond what was seen of it, is answered with 410
// Gone (it was issued by a leader whose last changes this replica never
// received), which makes client-go relist instead of silently mixing two
// histories. 30 bits keep every resourceVersion below 2^62, so it also fits
// an int64. RVs grow monotonically along a timeline, across resources,
// like etcd revisions.
type Clock struct {
	// cur is the latest RV handed out or received (or the epoch base).
	cur atomic.Uint64

	// mu orders every change of every store of this clock: RV assignment,
	// publication of items and history, and the replication feed. A store
	// takes its own lock first, then mu. A snapshot taken under mu alone is
	// a consistent cut of all stores (their items, lastRV and history are
	// written only under mu).
	mu       sync.Mutex
	leading  bool
	past     []EpochEnd
	stores   []*Store
	subs     map[*Subscription]struct{}
	advanced chan struct{} // closed (and replaced) whenever cur grows
}

// EpochEnd is an earlier epoch of a timeline and the last counter seen in it.
type EpochEnd struct {
	Epoch uint32 `json:"epoch"`
	Last  uint32 `json:"last"`
}

// NewClock returns a leading clock with a random epoch: a replica that
// leads on its own, without an election. Its RVs are then foreign to every
// other replica and to its own next run (410, a relist), as they must be:
// nothing ties their timelines together.
func NewClock() *Clock {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			// crypto/rand never fails on supported platforms (Go ≥1.24 it
			// crashes the program itself); keep the check for clarity.
			panic(fmt.Sprintf("memstore: reading random epoch: %v", err))
		}
		if e := binary.BigEndian.Uint32(b[:]) & epochMask; e != 0 {
			return newClockWithEpoch(e)
		}
	}
}

// NewStandbyClock returns a clock that neither leads nor follows yet: its
// stores are empty at RV 0 until Promote or Restore, and it issues nothing.
// A replica that waits for a leader election starts with one.
func NewStandbyClock() *Clock {
	return &Clock{advanced: make(chan struct{})}
}

// newClockWithEpoch exists so tests can build replicas with known epochs.
func newClockWithEpoch(epoch uint32) *Clock {
	if epoch == 0 || epoch > epochMask {
		panic(fmt.Sprintf("memstore: epoch %d outside 1..%d", epoch, epochMask))
	}
	c := &Clock{leading: true, advanced: make(chan struct{})}
	c.cur.Store(uint64(epoch) << counterBits)
	return c
}

func epochAt(t time.Time) uint32 {
	s := int64(t.Sub(epochBase) / time.Second)
	if s < 1 {
		// A clock set before 2025: any non-zero epoch; Promote still
		// makes it greater than the ones it knows.
		s = 1
	}
	if s > epochMask {
		panic("memstore: time-based epoch overflow (after 2059)")
	}
	return uint32(s)
}

func epochOf(rv uint64) uint32   { return uint32(rv >> counterBits) }
func counterOf(rv uint64) uint32 { return uint32(rv) }

// Epoch returns the current epoch (the high bits of the RVs it issues).
func (c *Clock) Epoch() uint32 { return epochOf(c.cur.Load()) }

// Current returns the latest resourceVersion handed out or received, or the
// epoch base (epoch<<32, never 0) if none was yet.
func (c *Clock) Current() uint64 { return c.cur.Load() }

// Leading reports whether this clock issues RVs (true) or follows a
// leader's (false).
func (c *Clock) Leading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

// nextLocked hands out a new resourceVersion; c.mu is held.
func (c *Clock) nextLocked() uint64 {
	rv := c.cur.Load()
	if counterOf(rv) == math.MaxUint32 {
		// 4.29e9 changes in one epoch: far beyond the expected rate (a few
		// per minute). Wrapping would break monotonicity; a restart picks a
		// new epoch and every client relists, which is correct, so fail
		// loudly.
		panic("memstore: resourceVersion counter exhausted; restart the process")
	}
	rv++
	c.cur.Store(rv)
	return rv
}

// advanceLocked moves cur to rv and wakes waitFresh; c.mu is held.
func (c *Clock) advanceLocked(rv uint64) {
	c.cur.Store(rv)
	close(c.advanced)
	c.advanced = make(chan struct{})
}

// owns reports whether rv belongs to this clock's timeline: the current
// epoch (at any counter: a future one is "too large", not foreign), or an
// earlier epoch up to the last counter seen in it.
func (c *Clock) owns(rv uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ownsLocked(rv)
}

func (c *Clock) ownsLocked(rv uint64) bool {
	e := epochOf(rv)
	if e == 0 {
		return false
	}
	if e == c.Epoch() {
		return true
	}
	for _, p := range c.past {
		if p.Epoch == e {
			return counterOf(rv) <= p.Last
		}
	}
	return false
}

// freshWait bounds how long a read with a resourceVersion the replica has
// not reached yet waits for it, as the watch cache waits for etcd.
const freshWait = 3 * time.Second

// waitFresh waits until the clock reaches rv when rv is in the current
// epoch and ahead of it (a follower a few milliseconds behind its leader),
// at most freshWait. Callers then answer from the state they find.
func (c *Clock) waitFresh(ctx context.Context, rv uint64) {
	if rv == 0 || epochOf(rv) != c.Epoch() || rv <= c.Current() {
		return
	}
	t := time.NewTimer(freshWait)
	defer t.Stop()
	for {
		c.mu.Lock()
		ch := c.advanced
		c.mu.Unlock()
		if rv <= c.Current() || epochOf(rv) != c.Epoch() {
			return
		}
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Promote makes this clock the leader of its timeline: a new epoch, greater
// than every epoch it knows and at least the time-based one, with the
// current epoch kept on the timeline up to its last counter. Promoting a
// leading clock is a no-op.
func (c *Clock) Promote() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leading {
		return
	}
	cur := c.cur.Load()
	e := max(epochAt(time.Now()), epochOf(cur)+1)
	if epochOf(cur) != 0 { // a standby clock has no epoch to keep
		c.past = append(c.past, EpochEnd{Epoch: epochOf(cur), Last: counterOf(cur)})
	}
	if len(c.past) > maxPastEpochs {
		c.past = slices.Clone(c.past[len(c.past)-maxPastEpochs:])
	}
	c.leading = true
	c.advanceLocked(uint64(e) << counterBits)
}

// Demote stops a leading clock from issuing RVs: Replace is refused until
// Promote, subscribers are ended, and the RVs issued so far stay valid here
// until a Restore from the new leader says what its timeline kept.
func (c *Clock) Demote() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leading = false
	c.closeSubsLocked()
}

func (c *Clock) register(s *Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stores = append(c.stores, s)
}

func (c *Clock) timelineLocked() Timeline {
	return Timeline{Past: slices.Clone(c.past), Current: c.cur.Load()}
}

// Timeline is a clock's position: the earlier epochs it has seen and its
// current RV.
type Timeline struct {
	Past    []EpochEnd `json:"past,omitempty"`
	Current uint64     `json:"current"`
}

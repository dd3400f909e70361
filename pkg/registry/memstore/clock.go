package memstore

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
)

const (
	epochBits   = 30
	counterBits = 32
	epochMask   = 1<<epochBits - 1
)

// Clock hands out resourceVersions shared by all stores of one process.
//
// A resourceVersion is epoch<<32 | counter. The epoch is a random non-zero
// 30-bit number chosen by NewClock, so a resourceVersion issued by another
// replica (or by an earlier run of this one) carries another epoch and is
// recognised: it is answered with 410 Gone, which makes client-go relist
// instead of silently mixing two unrelated timelines. 30 bits keep every
// resourceVersion below 2^62, so it also fits an int64.
//
// The counter is shared by every store of the process, so resourceVersions
// are monotonic across resources, like etcd revisions.
type Clock struct {
	epoch   uint64
	counter atomic.Uint64
}

// NewClock returns a clock with a fresh random epoch.
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

// newClockWithEpoch exists so tests can build two replicas with known epochs.
func newClockWithEpoch(epoch uint32) *Clock {
	if epoch == 0 || epoch > epochMask {
		panic(fmt.Sprintf("memstore: epoch %d outside 1..%d", epoch, epochMask))
	}
	return &Clock{epoch: uint64(epoch)}
}

// Epoch returns the clock's epoch (the high bits of every resourceVersion it issues).
func (c *Clock) Epoch() uint32 { return uint32(c.epoch) }

// Current returns the latest resourceVersion handed out, or the epoch base
// (epoch<<32, never 0) if none was yet.
func (c *Clock) Current() uint64 { return c.epoch<<counterBits | c.counter.Load() }

// next hands out a new resourceVersion. Callers hold their store's write lock,
// which is what makes "list RV = Current()" safe (see Store.List).
func (c *Clock) next() uint64 {
	n := c.counter.Add(1)
	if n > math.MaxUint32 {
		// 4.29e9 changes in one process: far beyond the expected rate (a
		// few per minute). Wrapping would break monotonicity, and moving to
		// another epoch would leave stores with history from two timelines;
		// a restart picks a new epoch and every client relists, which is the
		// correct outcome, so fail loudly.
		panic("memstore: resourceVersion counter exhausted; restart the process")
	}
	return c.epoch<<counterBits | n
}

// owns reports whether rv was issued by this clock's epoch.
func (c *Clock) owns(rv uint64) bool { return rv>>counterBits == c.epoch }

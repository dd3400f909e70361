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

package chaos

import (
	"context"
	"errors"
	"sync"
)

// Barrier makes the soaks of one invocation start each episode together
// (so their timelines line up); Abort releases it for good when a soak
// fails.
type Barrier struct {
	mu      sync.Mutex
	n, in   int
	gen     chan struct{}
	aborted bool
}

// NewBarrier is a barrier of n soaks.
func NewBarrier(n int) *Barrier { return &Barrier{n: n, gen: make(chan struct{})} }

// Wait returns when every soak called it (or the barrier was aborted).
func (b *Barrier) Wait(ctx context.Context) error {
	b.mu.Lock()
	if b.aborted {
		b.mu.Unlock()
		return errors.New("another soak failed")
	}
	gen := b.gen
	b.in++
	if b.in == b.n {
		b.in = 0
		b.gen = make(chan struct{})
		close(gen)
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	select {
	case <-gen:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Abort releases every waiter now and later.
func (b *Barrier) Abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.aborted {
		b.aborted = true
		close(b.gen)
	}
}

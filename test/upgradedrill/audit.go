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

package upgradedrill

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Convergence is how fast routing followed one step, read from the step
// server's audit log: the workload's requests that other servers proxied
// to it (the User-Agent names the server the client sent it to).
type Convergence struct {
	// ProxiedBefore counts requests proxied to the server in the 10 s
	// before its SIGTERM; Leave is from SIGTERM to the last one proxied
	// to it afterwards (0: none after SIGTERM). Nil when none came before.
	ProxiedBefore int            `json:"proxiedBefore"`
	Leave         *time.Duration `json:"leave,omitempty"`
	// Join is, per other server that proxied to it after it was ready
	// (until the next step), the time from ready to its first such request.
	Join map[int]time.Duration `json:"join,omitempty"`
}

// JoinP50Max are the median and the slowest of the servers' Join (0, 0
// when none proxied to it).
func (c Convergence) JoinP50Max() (p50, slowest time.Duration) {
	var d []time.Duration
	for _, j := range c.Join {
		d = append(d, j)
	}
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return d[(len(d)-1)/2], d[len(d)-1]
}

type auditEvent struct {
	Stage     string    `json:"stage"`
	Received  time.Time `json:"requestReceivedTimestamp"`
	UserAgent string    `json:"userAgent"`
}

// convergence reads the audit log of step.Step.Server; times are offsets
// from started; end is the end of the step's window.
func convergence(path string, started time.Time, step StepResult, end time.Duration) (Convergence, error) {
	c := Convergence{Join: map[int]time.Duration{}}
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var last time.Duration = -1
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Stage != "ResponseComplete" || !strings.HasPrefix(ev.UserAgent, userAgentPrefix) {
			continue
		}
		from, err := strconv.Atoi(strings.TrimPrefix(ev.UserAgent, userAgentPrefix))
		if err != nil || from == step.Step.Server {
			continue // sent to this server by the client: not proxied
		}
		at := ev.Received.Sub(started)
		switch {
		case at >= step.SIGTERM-10*time.Second && at < step.SIGTERM:
			c.ProxiedBefore++
		case at >= step.SIGTERM && at <= step.Exited:
			last = max(last, at-step.SIGTERM)
		case at >= step.Ready && at < end:
			if d, ok := c.Join[from]; !ok || at-step.Ready < d {
				c.Join[from] = at - step.Ready
			}
		}
	}
	if c.ProxiedBefore > 0 {
		d := max(last, 0)
		c.Leave = &d
	}
	return c, sc.Err()
}

// proxiedTo counts the requests in server's audit log (at path) that
// another server proxied to it between from and to (offsets from
// started).
func proxiedTo(path string, server int, started time.Time, from, to time.Duration) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Stage != "ResponseComplete" || !strings.HasPrefix(ev.UserAgent, userAgentPrefix) {
			continue
		}
		via, err := strconv.Atoi(strings.TrimPrefix(ev.UserAgent, userAgentPrefix))
		if at := ev.Received.Sub(started); err == nil && via != server && at >= from && at < to {
			n++
		}
	}
	return n, sc.Err()
}

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

// Package poll is the tests' one way to wait for a condition: apimachinery's
// wait.PollUntilContextTimeout, failing the test with what it waited for.
package poll

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Until calls cond at once and then every interval until it returns nil,
// and fails t with cond's last error after timeout.
func Until(t testing.TB, interval, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, last)
	}
}

// Eventually waits, as unit tests do, for cond to hold: every 5 ms for at
// most 20 s (generous, so a slow CI machine never flakes).
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Until(t, 5*time.Millisecond, 20*time.Second, what, func() error {
		if !cond() {
			return errNotYet
		}
		return nil
	})
}

var errNotYet = errorString("the condition does not hold yet")

type errorString string

func (e errorString) Error() string { return string(e) }

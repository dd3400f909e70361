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

package workload

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	samples := []Sample{
		{Phase: 0, Code: 200, Took: time.Millisecond, Verb: "get"},
		{Phase: 1, Code: 404, Took: 3 * time.Millisecond, Verb: "list"},
		{Phase: 1, Code: 409, Took: 2 * time.Millisecond, Verb: "update"},
		{Phase: 1, Code: 200, Took: time.Hour, Verb: "watch"},
	}
	attempts := []Attempt{{Phase: 1, Code: 503, RetryAfter: true}, {Phase: 1, Code: 503}, {Phase: 1, Code: 429}, {Phase: 0, Code: 502}, {Phase: 0}}
	per, total := Summarize(samples, attempts, 2)
	if total.Ops != 4 || total.OK != 2 || total.NotFound != 1 || total.Conflict != 1 || total.Failed != 2 ||
		total.UnavailableRetry != 1 || total.UnavailableNoHint != 1 || total.TooMany != 1 || total.Other5xx != 1 || total.NoResponse != 1 {
		t.Fatalf("total %+v", total)
	}
	if per[1].P99 != 3*time.Millisecond || per[0].P50 != time.Millisecond {
		t.Fatalf("latency (watches excluded): %+v", per)
	}
}

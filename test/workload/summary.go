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
	"slices"
	"time"
)

// Counts summarizes the samples and attempts of a span.
type Counts struct {
	// From the operations, after client-go's retries.
	Ops int `json:"ops"`
	OK  int `json:"ok"`
	// NotFound: operations answered 404. The workload sends operations
	// only for resources some server serves and (get, update, delete)
	// objects that exist, so each is a false 404 unless no server that
	// serves the resource runs (the caller knows).
	NotFound int `json:"notFound"`
	Conflict int `json:"conflict"`
	// Failed is every operation that did not succeed in the end.
	Failed int `json:"failed"`
	// From the HTTP attempts on the wire.
	Attempts          int `json:"attempts"`
	TooMany           int `json:"tooMany"`
	UnavailableRetry  int `json:"unavailableRetryAfter"`
	UnavailableNoHint int `json:"unavailableNoRetryAfter"`
	Other5xx          int `json:"other5xx"`
	NoResponse        int `json:"noResponse"`
	// Latency of the operations (watches excluded), retries included.
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
}

// Summarize counts per phase (phases is their number) and in total.
func Summarize(samples []Sample, attempts []Attempt, phases int) (perPhase []Counts, total Counts) {
	perPhase = make([]Counts, phases)
	lat := make([][]time.Duration, phases)
	var all []time.Duration
	for _, s := range samples {
		for _, c := range []*Counts{&perPhase[s.Phase], &total} {
			c.Ops++
			switch {
			case s.Code == 200:
				c.OK++
			case s.Code == 404:
				c.NotFound++
			case s.Code == 409:
				c.Conflict++
			}
			if s.Code != 200 {
				c.Failed++
			}
		}
		if s.Verb != "watch" {
			lat[s.Phase] = append(lat[s.Phase], s.Took)
			all = append(all, s.Took)
		}
	}
	for _, a := range attempts {
		for _, c := range []*Counts{&perPhase[a.Phase], &total} {
			c.Attempts++
			switch {
			case a.Code == 0:
				c.NoResponse++
			case a.Code == 429:
				c.TooMany++
			case a.Code == 503 && a.RetryAfter:
				c.UnavailableRetry++
			case a.Code == 503:
				c.UnavailableNoHint++
			case a.Code >= 500:
				c.Other5xx++
			}
		}
	}
	for i := range perPhase {
		perPhase[i].P50, perPhase[i].P99 = Percentile(lat[i], 0.50), Percentile(lat[i], 0.99)
	}
	total.P50, total.P99 = Percentile(all, 0.50), Percentile(all, 0.99)
	return perPhase, total
}

// Percentile is the q-quantile of d (0 for none).
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

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

package localcluster

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Finished runs beyond the newest keep are pruned, but none younger than
// keepRecentRuns: a failed lane's logs outlive the planes started after it.
func TestCleanStaleRunsKeepsRecentRuns(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	var names []string
	for _, age := range []time.Duration{48 * time.Hour, 47 * time.Hour, 2 * time.Hour, 90 * time.Minute, time.Hour, 30 * time.Minute, time.Minute} {
		name := now.Add(-age).Format("20060102-150405") + "-abcdef"
		names = append(names, name)
		if err := os.MkdirAll(filepath.Join(dir, name, "logs"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cleanStaleRuns(dir, 2, t.Logf)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	// The two old ones go; the five of the last three hours stay, though
	// keep is 2.
	if want := names[2:]; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}

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
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runMarker is OutputDir/local-up/<run>/run.json: who created the run's
// network namespace, so a later Start can clean up after a dead run.
type runMarker struct {
	PID      int       `json:"pid"`
	PIDStart uint64    `json:"pidStart"`
	Created  time.Time `json:"created"`
	Network  network   `json:"network"`
}

func (c *Cluster) writeMarker() error {
	m := runMarker{PID: os.Getpid(), PIDStart: procStartTime(os.Getpid()), Created: time.Now(), Network: *c.net}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.runDir, runMarkerFile), b, 0o644)
}

// procStartTime is field 22 of /proc/<pid>/stat (0 if unknown): with the
// pid it identifies a process across pid reuse.
func procStartTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(fields[19], 10, 64)
	return v
}

func (m *runMarker) ownerAlive() bool {
	if m.PID <= 0 {
		return false
	}
	if err := syscall.Kill(m.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return m.PIDStart == 0 || procStartTime(m.PID) == m.PIDStart
}

// cleanStaleRuns removes the network namespaces (and veths, and processes)
// of runs under dir whose creator is dead, and prunes the folders of
// finished runs beyond the newest keep.
func cleanStaleRuns(dir string, keep int, logf func(string, ...any)) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var finished []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		runDir := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(filepath.Join(runDir, runMarkerFile))
		if err != nil {
			if _, err := os.Stat(filepath.Join(runDir, "logs")); err == nil {
				finished = append(finished, runDir)
			}
			continue
		}
		var m runMarker
		if err := json.Unmarshal(b, &m); err != nil {
			continue
		}
		if m.ownerAlive() {
			continue
		}
		if m.Network.Name != "" && strings.HasPrefix(m.Network.Name, "pd-") {
			// A node-based run's containers are in no process tree and no
			// network namespace of ours: its cgroups find them.
			if err := cleanNodeRun(runDir, strings.TrimPrefix(m.Network.Name, "pd-")); err != nil {
				logf("cleaning up the nodes of %s: %v", e.Name(), err)
			}
			logf("cleaning up after dead run %s (pid %d): netns %s, veth %s", e.Name(), m.PID, m.Network.Name, m.Network.HostIf)
			if err := m.Network.destroy(); err != nil {
				logf("cleaning up %s: %v", m.Network.Name, err)
				continue
			}
		}
		_ = os.RemoveAll(filepath.Join(runDir, "etcd-data"))
		_ = os.Remove(filepath.Join(runDir, runMarkerFile))
		finished = append(finished, runDir)
	}
	// Run folder names start with a timestamp: oldest first.
	sort.Strings(finished)
	if len(finished) > keep {
		for _, d := range finished[:len(finished)-keep] {
			if startedWithin(filepath.Base(d), keepRecentRuns, time.Now()) {
				continue
			}
			_ = os.RemoveAll(d)
		}
	}
}

// keepRecentRuns: a run folder younger than this is never pruned. The test
// command starts more planes than DefaultKeepRuns, and the logs of a lane
// that failed early must outlive the planes that start after it.
const keepRecentRuns = 3 * time.Hour

// startedWithin tells whether a run folder's name (its start time, local
// time, then a suffix) is less than d before now.
func startedWithin(name string, d time.Duration, now time.Time) bool {
	const layout = "20060102-150405"
	if len(name) < len(layout) {
		return false
	}
	t, err := time.ParseInLocation(layout, name[:len(layout)], time.Local)
	return err == nil && now.Sub(t) < d
}

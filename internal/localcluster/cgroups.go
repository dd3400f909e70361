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
	"bufio"
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

// The node-based plane's processes live in cgroups of their own, under
// cgroupBase/<run> in every mounted hierarchy: each node's containerd and
// kubelet (and so the shims containerd starts) in <node>/system, and the
// kubelet's Pods under <node>/kubepods (its --cgroup-root is <node>). One
// walk of that subtree finds every process a run started, even the
// containers of a harness that crashed, which no process tree or network
// namespace reaches.
const cgroupBase = "peerdiscovery"

// cgroupHierarchies are the mount points of the cgroup hierarchies
// (v1 controllers, the named systemd hierarchy and, on a hybrid host, the
// unified v2 one), from /proc/self/mountinfo.
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if fs := fields[sep+1]; fs == "cgroup" || fs == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	sort.Strings(out)
	return out, nil
}

// ensureCgroup creates rel (e.g. peerdiscovery/<run>/node-0/system) in
// every hierarchy. In the cpuset hierarchy each new level gets its
// parent's cpus and mems: a v1 cpuset starts empty and takes no process.
func ensureCgroup(rel string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		parts := strings.Split(strings.Trim(rel, "/"), "/")
		dir := h
		for _, p := range parts {
			parent := dir
			dir = filepath.Join(dir, p)
			if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					continue // not the cpuset hierarchy
				}
				if b, _ := os.ReadFile(filepath.Join(dir, f)); strings.TrimSpace(string(b)) != "" {
					continue
				}
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// cgroupJoinScript is a shell prologue that moves the shell into rel in
// every hierarchy before it execs the component, so everything it starts
// is there too.
func cgroupJoinScript(rel string) (string, error) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "echo $$ > %s && ", shellJoin([]string{filepath.Join(h, rel, "cgroup.procs")}))
	}
	return b.String(), nil
}

// cgroupPIDs lists the processes in rel and every cgroup below it, in
// every hierarchy.
func cgroupPIDs(rel string) []int {
	hs, _ := cgroupHierarchies()
	seen := map[int]bool{}
	var out []int
	for _, h := range hs {
		root := filepath.Join(h, rel)
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// killCgroup SIGKILLs every process in rel and below, with the v1 freezer
// holding them still (no fork escapes between the listing and the kill),
// until none is left or timeout passes.
func killCgroup(rel string, timeout time.Duration) error {
	hs, _ := cgroupHierarchies()
	var freezer string
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h, rel, "freezer.state")); err == nil {
			freezer = filepath.Join(h, rel, "freezer.state")
		}
	}
	if freezer != "" {
		_ = os.WriteFile(freezer, []byte("FROZEN"), 0o644)
		defer func() { _ = os.WriteFile(freezer, []byte("THAWED"), 0o644) }()
	}
	deadline := time.Now().Add(timeout)
	for {
		pids := cgroupPIDs(rel)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			if pid > 1 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if freezer != "" {
			// A frozen task dies only once thawed.
			_ = os.WriteFile(freezer, []byte("THAWED"), 0o644)
			time.Sleep(50 * time.Millisecond)
			_ = os.WriteFile(freezer, []byte("FROZEN"), 0o644)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes left in cgroup %s after SIGKILL: %v", rel, pids)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroup removes rel and every cgroup below it, deepest first, in
// every hierarchy. It fails while a process is left in one of them.
func removeCgroup(rel string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join(h, rel)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		// Deepest first.
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

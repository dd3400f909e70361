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
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one component: a command run in its own process group, with
// its output appended to a log file. It can be stopped and started again
// with the same command line.
type process struct {
	name    string
	logPath string
	argv    []string
	env     []string // added to this process's environment
	// cred, when set, is the user and groups it runs as (each
	// kube-apiserver has a group of its own: faults.go).
	cred *syscall.Credential

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current run exited
	err     error         // exit status of the last run
	started time.Time     // when the current run started
}

// start runs the command. The child gets its own process group (so stop
// reaches everything it spawned) and SIGKILL when this process dies.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
		}
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "=== %s starting %s: %s\n", time.Now().Format(time.RFC3339Nano), p.name, shellJoin(p.argv))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.cred}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err, p.started = cmd, done, nil, time.Now()
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logFile, "=== %s %s exited: %v\n", time.Now().Format(time.RFC3339Nano), p.name, exitString(err))
		logFile.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// exitErr describes why the process is not running ("" while it runs).
func (p *process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s was never started", p.name)
	}
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %s", p.name, exitString(p.err))
	default:
		return nil
	}
}

// run returns the current run's exit channel and start time (nil before
// the first start).
func (p *process) run() (<-chan struct{}, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done, p.started
}

// stop sends sig to the process group, waits up to grace for the exit, then
// SIGKILLs the group. It is a no-op when the process does not run.
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	pgid := cmd.Process.Pid
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s: %w", p.name, err)
	}
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
		}
	}
	// Whatever is left in the group (nothing, normally) goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// signal sends sig to the process group of a running process.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	select {
	case <-done:
		return fmt.Errorf("%s is not running", p.name)
	default:
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// logTail returns the last n lines of the log.
func (p *process) logTail(n int) string {
	return tailFile(p.logPath, n)
}

func tailFile(path string, n int) string {
	return lastLines(string(readTail(path, 64<<10)), n)
}

// readTail reads up to the last max bytes of the file at path (nothing if
// it cannot be read).
func readTail(path string, max int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return b
}

// logErrors returns the last n distinct klog error lines (E...) and panics
// of the log: what usually explains a component that does not get ready,
// buried under repeated health-check lines.
func (p *process) logErrors(n int) string {
	b := readTail(p.logPath, 4<<20)
	var out []string
	seen := map[string]bool{}
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0 && len(out) < n; i-- {
		l := lines[i]
		if !(strings.HasPrefix(l, "E") || strings.HasPrefix(l, "F") || strings.HasPrefix(l, "panic:")) {
			continue
		}
		// Dedupe on the message, without the klog header.
		key := l
		if j := strings.Index(l, "] "); j >= 0 {
			key = l[j+2:]
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, l)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return strings.Join(out, "\n")
}

// shellJoin quotes argv for display.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// pid is the process id of the current run (0 when not running).
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

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

package kubeadm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Values a run draws at random, and what docs/operations.md shows instead.
var runValues = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`token: [a-z0-9]{6}\.[a-z0-9]{16}`), "token: abcdef.0123456789abcdef"},
	{regexp.MustCompile(`certificateKey: [0-9a-f]{64}`), "certificateKey: <kubeadm certs certificate-key>"},
	{regexp.MustCompile(`- sha256:[0-9a-f]{64}`), "- sha256:<hash of /etc/kubernetes/pki/ca.crt>"},
	// etcd's static Pod UID, one per node (uuidgen): the runbook's example.
	{regexp.MustCompile(`(?m)^  value: [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`), "  value: 0b6b2c8e-6f1e-4a57-9d3c-2f0e8c1d4a7b"},
	{regexp.MustCompile(`deploy-certs\.sh --dir \S+`), "deploy-certs.sh"},
	// The run's haproxy socket; the runbook names Debian's.
	{regexp.MustCompile(`socat stdio \S+`), "socat stdio /run/haproxy/admin.sock"},
}

func operationsDoc(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

func docLines(t *testing.T) map[string]bool {
	t.Helper()
	lines := map[string]bool{}
	for _, l := range strings.Split(operationsDoc(t), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	return lines
}

func normalize(s string) string {
	for _, v := range runValues {
		s = v.re.ReplaceAllString(s, v.repl)
	}
	return s
}

// checkDocsHaveCommands: every command the plane's admin ran (the run's
// commands.log: on a node or with kubectl) is a line of
// docs/operations.md, word for word. node-2 does what node-1 does, so the
// docs show node-1's.
func checkDocsHaveCommands(t *testing.T) {
	t.Helper()
	lines := docLines(t)
	log, err := os.ReadFile(filepath.Join(planeDir, "commands.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		_, cmd, ok := strings.Cut(l, ": ")
		if !ok {
			t.Fatalf("commands.log: %q", l)
		}
		cmd = normalize(strings.ReplaceAll(cmd, "node-2", "node-1"))
		if n++; !lines[cmd] {
			t.Errorf("docs/operations.md lacks the command %q (run as %q)", cmd, l)
		}
	}
	if n == 0 {
		t.Error("commands.log is empty")
	}
}

// checkDocsHaveFiles: each of the node's kubeadm files, as the run wrote
// it (random values replaced), is a yaml block of docs/operations.md
// (indented or not).
func checkDocsHaveFiles(t *testing.T, node int, files ...string) {
	t.Helper()
	blocks := yamlBlocks(t)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(planeDir, "nodes", fmt.Sprintf("node-%d", node), "etc", "kubernetes", f))
		if err != nil {
			t.Fatal(err)
		}
		if want := normalize(string(b)); !blocks[want] {
			t.Errorf("docs/operations.md has no yaml block equal to node-%d's /etc/kubernetes/%s:\n%s", node, f, want)
		}
	}
}

// yamlBlocks are the ```yaml blocks of docs/operations.md, each without
// the indentation of its opening fence.
func yamlBlocks(t *testing.T) map[string]bool {
	t.Helper()
	blocks := map[string]bool{}
	var cur []string
	indent, in := "", false
	for _, l := range strings.Split(operationsDoc(t), "\n") {
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case !in && trimmed == "```yaml":
			indent, in, cur = l[:len(l)-len(trimmed)], true, nil
		case in && trimmed == "```":
			blocks[strings.Join(cur, "\n")+"\n"] = true
			in = false
		case in:
			cur = append(cur, strings.TrimPrefix(l, indent))
		}
	}
	return blocks
}

// TestDocsMatchAKeptRun checks docs/operations.md against a plane's run
// folder that is kept after `hack/kubeadm-plane.sh down`
// (PEERDISCOVERY_KUBEADM_RUN=_output/kubeadm/<run>): to check an edit of
// the docs without making a plane again.
func TestDocsMatchAKeptRun(t *testing.T) {
	dir := os.Getenv("PEERDISCOVERY_KUBEADM_RUN")
	if dir == "" {
		t.Skip("PEERDISCOVERY_KUBEADM_RUN names no kept run")
	}
	planeDir = dir
	checkDocsHaveFiles(t, 0, "kubeadm/init.yaml", "patches/etcd0+json.yaml")
	checkDocsHaveFiles(t, 1, "kubeadm/join.yaml", "patches/etcd0+json.yaml")
	if _, err := os.Stat(filepath.Join(dir, "nodes", "node-0", "etc", "kubernetes", "kubeadm", "upgrade.yaml")); err == nil {
		checkDocsHaveFiles(t, 0, "kubeadm/upgrade.yaml")
	}
	checkDocsHaveCommands(t)
}

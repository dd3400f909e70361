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

// Package readme checks that the README's code is the code that runs.
package readme

import (
	"os"
	"strings"
	"testing"
)

// goBlockAfter returns the lines of the first ```go block after heading.
func goBlockAfter(t *testing.T, doc, heading string) []string {
	t.Helper()
	i := strings.Index(doc, heading)
	if i < 0 {
		t.Fatalf("the README has no %q", heading)
	}
	rest := doc[i:]
	start := strings.Index(rest, "```go\n")
	if start < 0 {
		t.Fatalf("no go block after %q", heading)
	}
	rest = rest[start+len("```go\n"):]
	end := strings.Index(rest, "\n```")
	if end < 0 {
		t.Fatal("unterminated go block")
	}
	return strings.Split(rest[:end], "\n")
}

// TestIntegrationSnippetIsTheBuiltCode: every line of the README's
// integration snippet, comments aside, is a line of
// hack/kube-apiserver/main.go, in the same order. Every kube-apiserver the
// project builds compiles that file, so the snippet compiles as written;
// and it carries every hook an integrator needs.
func TestIntegrationSnippetIsTheBuiltCode(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	main, err := os.ReadFile("../../hack/kube-apiserver/main.go")
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	for _, l := range strings.Split(string(main), "\n") {
		code = append(code, strings.TrimSpace(l))
	}
	snippet := goBlockAfter(t, string(readme), "## Integrating the filter")
	next := 0
	for _, l := range snippet {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		found := false
		for ; next < len(code); next++ {
			if code[next] == l {
				found, next = true, next+1
				break
			}
		}
		if !found {
			t.Fatalf("README line %q is not in hack/kube-apiserver/main.go (after the lines before it)", l)
		}
	}
	for _, must := range []string{"f.WrapHandler(", "f.PostStartHook", "f.PreShutdownHook", "f.ReadyzCheck()", "f.WrapDiscoveryManager("} {
		if !strings.Contains(strings.Join(snippet, "\n"), must) {
			t.Errorf("the snippet leaves out %s", must)
		}
	}
}

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

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const repoRoot = "../.."

func parseRepoDockerfile(t *testing.T) *Dockerfile {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	df, err := ParseDockerfile(f)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return df
}

func TestParseDockerfile(t *testing.T) {
	df, err := ParseDockerfile(strings.NewReader(`# syntax=docker/dockerfile:1
ARG GO=1.26
FROM golang:${GO} AS build
RUN go build \
      -o /out/x \
      # a comment inside
      ./cmd/x
FROM scratch
COPY --from=build /out/x /x
USER 1:1
USER 2:2
EXPOSE 80 53/udp
ENTRYPOINT ["/x", "--flag"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if df.Args["GO"] != "1.26" || len(df.Stages) != 2 || df.Stages[0].Name != "build" {
		t.Fatalf("parsed %+v", df)
	}
	if got := df.Stages[0].Last("RUN"); got != "go build -o /out/x ./cmd/x" {
		t.Errorf("RUN = %q", got)
	}
	fin := df.Final()
	if fin.Last("USER") != "2:2" {
		t.Errorf("USER = %q, want the last one", fin.Last("USER"))
	}
	if got := fin.ExposedPorts(); !slices.Equal(got, []string{"80/tcp", "53/udp"}) {
		t.Errorf("EXPOSE = %v", got)
	}
	if ep, err := fin.Entrypoint(); err != nil || !slices.Equal(ep, []string{"/x", "--flag"}) {
		t.Errorf("ENTRYPOINT = %v, %v", ep, err)
	}
	if cp, err := fin.Copies(); err != nil || len(cp) != 1 || cp[0] != (Copy{From: "build", Src: "/out/x", Dst: "/x"}) {
		t.Errorf("COPY = %+v, %v", cp, err)
	}
	for _, bad := range []string{"RUN x\n", "FROM a b\n", "FROM a\nRUN x \\\n"} {
		if _, err := ParseDockerfile(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseDockerfile(%q): no error", bad)
		}
	}
	if _, err := (Stage{Instructions: []Instruction{{"ENTRYPOINT", "/x --flag"}}}).Entrypoint(); err == nil {
		t.Error("a shell-form ENTRYPOINT was accepted")
	}
}

// goBuild is the Dockerfile's `go build` of the final image's binary.
type goBuild struct {
	env     map[string]string
	flags   map[string]string // -trimpath: "true"; -ldflags: its value
	out     string
	pkg     string
	ldflags []string
}

// dockerGoBuild finds and splits the build stage's go build command.
func dockerGoBuild(t *testing.T, df *Dockerfile) goBuild {
	t.Helper()
	for _, st := range df.Stages {
		for _, run := range st.All("RUN") {
			if !strings.Contains(run, "go build") {
				continue
			}
			words := shellWords(t, run)
			gb := goBuild{env: map[string]string{}, flags: map[string]string{}}
			i := 0
			for ; i < len(words) && strings.Contains(words[i], "="); i++ {
				k, v, _ := strings.Cut(words[i], "=")
				gb.env[k] = v
			}
			if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
				t.Fatalf("RUN %s: want [ENV=...] go build ...", run)
			}
			for i += 2; i < len(words); i++ {
				w := words[i]
				switch {
				case w == "-o":
					i++
					gb.out = words[i]
				case w == "-ldflags":
					i++
					gb.flags[w] = words[i]
					gb.ldflags = strings.Fields(words[i])
				case strings.HasPrefix(w, "-"):
					k, v, ok := strings.Cut(w, "=")
					if !ok {
						v = "true"
					}
					gb.flags[k] = v
				default:
					gb.pkg = w
				}
			}
			return gb
		}
	}
	t.Fatal("the Dockerfile has no RUN go build")
	return goBuild{}
}

// shellWords splits a RUN line the way sh would for this Dockerfile:
// whitespace, double quotes (no escapes or substitutions are needed).
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote, have = !inQuote, true
		case (r == ' ' || r == '\t') && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if inQuote {
		t.Fatalf("unbalanced quotes in %q", s)
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// TestSpecMatchesDockerfile: the builder's peerdiscovery-apiserver image
// is the Dockerfile's final stage (user, entrypoint, ports, the binary's
// path, a static binary on a nonroot distroless base).
func TestSpecMatchesDockerfile(t *testing.T) {
	df := parseRepoDockerfile(t)
	fin := df.Final()
	spec, err := NewSpec(KindExtension, Registry+"/peerdiscovery-apiserver:v0.0.0", "unused")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(fin.From, "gcr.io/distroless/static") || !strings.HasSuffix(fin.From, ":nonroot") {
		t.Errorf("the Dockerfile's base is %s; base.go stands in for distroless/static:nonroot", fin.From)
	}
	if got := fin.Last("USER"); got != spec.User {
		t.Errorf("Dockerfile USER %q, image user %q", got, spec.User)
	}
	if ep, err := fin.Entrypoint(); err != nil || !slices.Equal(ep, spec.Entrypoint) {
		t.Errorf("Dockerfile ENTRYPOINT %v (%v), image entrypoint %v", ep, err, spec.Entrypoint)
	}
	if got := fin.ExposedPorts(); !slices.Equal(got, spec.ExposedPorts) {
		t.Errorf("Dockerfile EXPOSE %v, image %v", got, spec.ExposedPorts)
	}
	copies, err := fin.Copies()
	if err != nil {
		t.Fatal(err)
	}
	gb := dockerGoBuild(t, df)
	if len(copies) != 1 || copies[0].Src != gb.out || copies[0].Dst != spec.Path {
		t.Errorf("Dockerfile final stage copies %+v; the image has only %s, built to %s", copies, spec.Path, gb.out)
	}
	if gb.env["CGO_ENABLED"] != "0" {
		t.Errorf("the Dockerfile builds with CGO_ENABLED=%q; the base has no libc", gb.env["CGO_ENABLED"])
	}
}

// TestDockerfileCopiesEveryPackage: the Dockerfile's build stage copies
// the folders of every package of this module the binary imports (the
// archive is built from the whole checkout; a Docker build of a package
// left out would fail).
func TestDockerfileCopiesEveryPackage(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	df := parseRepoDockerfile(t)
	gb := dockerGoBuild(t, df)
	var copied []string
	for _, c := range df.Stages[0].All("COPY") {
		f := strings.Fields(c)
		if len(f) == 2 && strings.HasSuffix(f[0], "/") {
			copied = append(copied, strings.TrimSuffix(f[0], "/"))
		}
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", gb.pkg)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	abs, _ := filepath.Abs(repoRoot)
	for _, d := range strings.Fields(string(out)) {
		rel, _ := filepath.Rel(abs, d)
		top, _, _ := strings.Cut(rel, string(filepath.Separator))
		if !slices.Contains(copied, top) {
			t.Errorf("%s imports %s, but the Dockerfile copies only %v", gb.pkg, rel, copied)
		}
	}
}

// TestUpstreamSpec: kubeadm's images run as root and name the binary by
// its file, whatever the image is called (the filter build goes under
// another name, same command).
func TestUpstreamSpec(t *testing.T) {
	s, err := NewSpec(KindUpstream, "registry.example.com/kube-apiserver-peerdiscovery:v1.37.2", "/out/kube-apiserver-v1.37.2/kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	if s.Path != "/usr/local/bin/kube-apiserver" || s.User != RootUser || !slices.Equal(s.Entrypoint, []string{"/usr/local/bin/kube-apiserver"}) {
		t.Errorf("spec %+v: want /usr/local/bin/kube-apiserver as root", s)
	}
}

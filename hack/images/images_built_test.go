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
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// builtImages is images.json of PEERDISCOVERY_IMAGES_DIR (default
// _output/images). Without it the archive checks are skipped, unless
// PEERDISCOVERY_IMAGES_REQUIRED=1 (hack/test.sh, after hack/build-images.sh).
func builtImages(t *testing.T) (string, []Built) {
	t.Helper()
	dir := os.Getenv("PEERDISCOVERY_IMAGES_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot, "_output", "images")
	}
	b, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		if os.Getenv("PEERDISCOVERY_IMAGES_REQUIRED") == "1" {
			t.Fatalf("no images to check: %v (run hack/build-images.sh)", err)
		}
		t.Skipf("no images to check (%v): run hack/build-images.sh, or set PEERDISCOVERY_IMAGES_REQUIRED=1 to fail", err)
	}
	var built []Built
	if err := json.Unmarshal(b, &built); err != nil {
		t.Fatal(err)
	}
	return dir, built
}

// imageFile is one file of an image's flattened file system.
type imageFile struct {
	hdr  tar.Header
	data []byte // regular files only, up to maxRead
}

const maxRead = 512 << 20

// openImage reads archive (an OCI layout in a tar) and returns its one
// image, the index annotations and the flattened file system.
func openImage(t *testing.T, archive string) (v1.Image, map[string]string, map[string]imageFile) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Name)))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s is not an OCI image layout: %v", archive, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%s: %d manifests, want 1", archive, len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]imageFile{}
	fr := tar.NewReader(rc)
	for {
		h, err := fr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		file := imageFile{hdr: *h}
		if h.Typeflag == tar.TypeReg {
			file.data, err = io.ReadAll(io.LimitReader(fr, maxRead))
			if err != nil {
				t.Fatal(err)
			}
		}
		files["/"+strings.TrimPrefix(path.Clean("/"+h.Name), "/")] = file
	}
	return img, im.Manifests[0].Annotations, files
}

// TestImages checks every archive hack/build-images.sh wrote: named as
// images.json says, the user, the entrypoint, one executable and no shell,
// a static binary built as its release says (kube-apiserver: with the
// filter), and for peerdiscovery-apiserver, the Dockerfile's build flags.
func TestImages(t *testing.T) {
	dir, built := builtImages(t)
	if len(built) == 0 {
		t.Fatal("images.json lists no image")
	}
	df := parseRepoDockerfile(t)
	gb := dockerGoBuild(t, df)
	version, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range built {
		t.Run(b.Archive, func(t *testing.T) {
			img, ann, files := openImage(t, filepath.Join(dir, b.Archive))
			if ann[annotationContainerdName] != b.Ref {
				t.Errorf("annotation %s = %q, want %q", annotationContainerdName, ann[annotationContainerdName], b.Ref)
			}
			d, _ := img.Digest()
			if d.String() != b.Digest {
				t.Errorf("digest %s, images.json says %s", d, b.Digest)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			name, tag, _ := splitRef(b.Ref)
			base := path.Base(name)
			var want Spec
			switch {
			case base == "peerdiscovery-apiserver":
				want, _ = NewSpec(KindExtension, b.Ref, "")
				if tag != strings.TrimSpace(string(version)) {
					t.Errorf("tag %s, VERSION %s", tag, strings.TrimSpace(string(version)))
				}
			case base == "pause":
				want, _ = NewSpec(KindPause, b.Ref, "")
			case strings.HasPrefix(base, "kube-"):
				want, _ = NewSpec(KindKube, b.Ref, "")
			default:
				t.Fatalf("unexpected image %s", b.Ref)
			}
			if cf.OS != "linux" || cf.Config.User != want.User || !slices.Equal(cf.Config.Entrypoint, want.Entrypoint) {
				t.Errorf("config: os %s, user %q, entrypoint %v; want linux, %q, %v", cf.OS, cf.Config.User, cf.Config.Entrypoint, want.User, want.Entrypoint)
			}
			if want.User != PauseUser && cf.Config.User != "65532:65532" {
				t.Errorf("user %q, want 65532:65532 (nonroot)", cf.Config.User)
			}
			var execs []string
			for p, f := range files {
				if f.hdr.Typeflag == tar.TypeReg && f.hdr.Mode&0o111 != 0 {
					execs = append(execs, p)
				}
				switch path.Base(p) {
				case "sh", "bash", "dash", "ash", "busybox", "zsh":
					t.Errorf("%s: a shell in the image", p)
				}
			}
			if !slices.Equal(execs, []string{want.Path}) {
				t.Errorf("executables %v, want only %s", execs, want.Path)
			}
			if !strings.Contains(string(files["/etc/passwd"].data), "nonroot:x:65532:65532:") {
				t.Error("/etc/passwd has no nonroot user 65532")
			}
			if len(files["/etc/ssl/certs/ca-certificates.crt"].data) == 0 {
				t.Error("no CA bundle")
			}
			bin := files[want.Path].data
			if ef, err := elf.NewFile(bytes.NewReader(bin)); err != nil {
				t.Errorf("%s: %v", want.Path, err)
			} else {
				for _, p := range ef.Progs {
					if p.Type == elf.PT_INTERP {
						t.Errorf("%s is dynamically linked; the image has no libc", want.Path)
					}
				}
			}
			bi, err := buildinfo.Read(bytes.NewReader(bin))
			if err != nil {
				t.Fatalf("%s: no Go build information: %v", want.Path, err)
			}
			settings := map[string]string{}
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
			if settings["CGO_ENABLED"] != "0" {
				t.Errorf("%s built with CGO_ENABLED=%q", want.Path, settings["CGO_ENABLED"])
			}
			// k8s.io/kubernetes is the main module of a command built as a
			// tool (hack/lib/kube-release.sh), a dependency of the
			// kube-apiserver wrapper.
			deps := map[string]string{bi.Main.Path: bi.Main.Version}
			for _, m := range bi.Deps {
				deps[m.Path] = m.Version
			}
			switch {
			case base == "peerdiscovery-apiserver":
				checkDockerBuild(t, gb, bi, settings, tag, bin)
			case strings.HasPrefix(base, "kube-"):
				if v := deps["k8s.io/kubernetes"]; v != tag {
					t.Errorf("%s is k8s.io/kubernetes %q, the tag says %s", want.Path, v, tag)
				}
				_, filter := deps["sigs.k8s.io/peerdiscovery"]
				if base == "kube-apiserver" && !filter {
					t.Errorf("%s does not carry the filter (no sigs.k8s.io/peerdiscovery in its build information)", want.Path)
				}
				if base != "kube-apiserver" && filter {
					t.Errorf("%s is meant to be plain upstream, but links sigs.k8s.io/peerdiscovery", want.Path)
				}
			}
		})
	}
}

// checkDockerBuild compares the binary with the Dockerfile's go build:
// its package, CGO_ENABLED, GOOS and -trimpath from the build information;
// -ldflags (which -trimpath keeps out of it) from the binary itself: -s and
// -w leave no symbol table and no DWARF, and every -X of
// k8s.io/component-base/version shows in --version=raw (${VERSION} is the
// tag, ${GIT_COMMIT} anything but empty).
func checkDockerBuild(t *testing.T, gb goBuild, bi *buildinfo.BuildInfo, settings map[string]string, tag string, bin []byte) {
	t.Helper()
	if want := "sigs.k8s.io/peerdiscovery/" + strings.TrimPrefix(gb.pkg, "./"); bi.Path != want {
		t.Errorf("binary of %s, the Dockerfile builds %s", bi.Path, want)
	}
	for k, v := range gb.env {
		if settings[k] != v {
			t.Errorf("%s=%q, the Dockerfile sets %q", k, settings[k], v)
		}
	}
	for k, v := range gb.flags {
		if k == "-ldflags" {
			continue
		}
		if settings[k] != v {
			t.Errorf("%s=%q, the Dockerfile sets %q", k, settings[k], v)
		}
	}
	for k := range settings {
		if strings.HasPrefix(k, "vcs") {
			t.Errorf("build setting %s: the Dockerfile's build has no VCS information (no .git in its context)", k)
		}
	}
	ef, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "--version=raw").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version=raw: %v: %s", gb.out, err, out)
	}
	info := map[string]string{}
	for _, m := range regexp.MustCompile(`(\w+):"([^"]*)"`).FindAllStringSubmatch(string(out), -1) {
		info[m[1]] = m[2]
	}
	// Both ways: a flag dropped from the Dockerfile but kept in
	// hack/build-images.sh shows too.
	if !slices.Contains(gb.ldflags, "-s") && ef.Section(".symtab") == nil {
		t.Error("the binary has no symbol table, but the Dockerfile does not build with -s")
	}
	if !slices.Contains(gb.ldflags, "-w") && ef.Section(".debug_info") == nil && ef.Section(".zdebug_info") == nil {
		t.Error("the binary has no DWARF, but the Dockerfile does not build with -w")
	}
	for i := 0; i < len(gb.ldflags); i++ {
		switch w := gb.ldflags[i]; w {
		case "-s":
			if ef.Section(".symtab") != nil {
				t.Error("-s: the binary has a symbol table")
			}
		case "-w":
			for _, sec := range ef.Sections {
				if strings.HasPrefix(sec.Name, ".debug_") || strings.HasPrefix(sec.Name, ".zdebug_") {
					t.Errorf("-w: the binary has DWARF section %s", sec.Name)
				}
			}
		case "-X":
			i++
			name, value, _ := strings.Cut(gb.ldflags[i], "=")
			v, ok := strings.CutPrefix(name, "k8s.io/component-base/version.")
			if !ok {
				t.Errorf("-X %s: not checked here (only k8s.io/component-base/version)", name)
				continue
			}
			field := strings.ToUpper(v[:1]) + v[1:]
			got, ok := info[field]
			switch {
			case !ok:
				t.Errorf("-X %s: no %s in --version=raw: %s", name, field, out)
			case value == "${VERSION}" && got != tag:
				t.Errorf("-X %s: %q, want the tag %q", name, got, tag)
			case value == "${GIT_COMMIT}" && got == "":
				t.Errorf("-X %s: empty", name)
			case !strings.Contains(value, "${") && got != value:
				t.Errorf("-X %s: %q, the Dockerfile sets %q", name, got, value)
			}
		default:
			t.Errorf("-ldflags %s: not checked here", w)
		}
	}
}

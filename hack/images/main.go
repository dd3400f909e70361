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

// Command build-images writes OCI image archives without a container
// daemon, with github.com/google/go-containerregistry: hack/build-images.sh
// builds the binaries and runs it as
//
//	go run . --out _output/images --image extension,registry.k8s.io/peerdiscovery/peerdiscovery-apiserver:v0.1.0,PATH ...
//
// Each image is a shared base layer (see base.go) plus one layer with its
// binary; each archive is an OCI image layout packed in a tar file,
// <name>-<tag>.tar, for `ctr -n k8s.io images import`. images.json in the
// output folder lists what was written (reference, archive, manifest
// digest, sizes).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Built is one written image, as listed in images.json.
type Built struct {
	Ref     string `json:"ref"`
	Archive string `json:"archive"`
	Digest  string `json:"digest"`
	// ArchiveBytes is the archive's size; CompressedBytes the layers'
	// compressed sizes (what a registry would hold) and UncompressedBytes
	// the unpacked file system.
	ArchiveBytes      int64 `json:"archiveBytes"`
	CompressedBytes   int64 `json:"compressedBytes"`
	UncompressedBytes int64 `json:"uncompressedBytes"`
}

type imageFlags []Spec

func (f *imageFlags) String() string { return fmt.Sprint(len(*f)) }

func (f *imageFlags) Set(v string) error {
	parts := strings.SplitN(v, ",", 3)
	if len(parts) != 3 {
		return fmt.Errorf("--image %q: want KIND,REF,BINARY", v)
	}
	s, err := NewSpec(Kind(parts[0]), parts[1], parts[2])
	if err != nil {
		return err
	}
	*f = append(*f, s)
	return nil
}

func main() {
	var images imageFlags
	out := flag.String("out", "", "output folder for the archives and images.json")
	epoch := flag.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "the time of every file and of the image config, in seconds since 1970 (default 0)")
	flag.Var(&images, "image", "KIND,REF,BINARY: an image of kind extension, kube or pause (repeatable)")
	flag.Parse()
	if *out == "" || len(images) == 0 {
		log.Fatal("usage: build-images --out DIR --image KIND,REF,BINARY...")
	}
	mtime := time.Unix(0, 0).UTC()
	if *epoch != "" {
		secs, err := strconv.ParseInt(*epoch, 10, 64)
		if err != nil {
			log.Fatalf("--source-date-epoch %q: %v", *epoch, err)
		}
		mtime = time.Unix(secs, 0).UTC()
	}
	if err := run(*out, images, mtime); err != nil {
		log.Fatal(err)
	}
}

func run(out string, specs []Spec, mtime time.Time) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b, err := newBuilder(tmp, mtime)
	if err != nil {
		return err
	}
	previous := map[string]Built{}
	for _, p := range readIndex(filepath.Join(out, "images.json")) {
		previous[p.Ref] = p
	}
	var built []Built
	for _, s := range specs {
		start := time.Now()
		archive := filepath.Join(out, ArchiveName(s.Ref))
		inputs, err := b.inputsDigest(s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Ref, err)
		}
		if p, ok := previous[s.Ref]; ok && upToDate(archive, inputs) {
			log.Printf("%s: up to date (%s)", s.Ref, archive)
			built = append(built, p)
			continue
		}
		img, err := b.image(s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Ref, err)
		}
		if err := b.writeArchive(img, s, archive); err != nil {
			return fmt.Errorf("%s: %w", s.Ref, err)
		}
		if err := os.WriteFile(archive+".inputs", []byte(inputs+"\n"), 0o644); err != nil {
			return err
		}
		d, err := img.Digest()
		if err != nil {
			return err
		}
		bt := Built{Ref: s.Ref, Archive: filepath.Base(archive), Digest: d.String()}
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		for _, l := range layers {
			c, err := l.Size()
			if err != nil {
				return err
			}
			u, err := uncompressedSize(l)
			if err != nil {
				return err
			}
			bt.CompressedBytes += c
			bt.UncompressedBytes += u
		}
		if st, err := os.Stat(archive); err == nil {
			bt.ArchiveBytes = st.Size()
		}
		built = append(built, bt)
		log.Printf("%s: %s (%s, %.1f MB compressed, %.1f MB unpacked) in %s", s.Ref, archive, d,
			float64(bt.CompressedBytes)/1e6, float64(bt.UncompressedBytes)/1e6, time.Since(start).Round(100*time.Millisecond))
	}
	return mergeIndex(filepath.Join(out, "images.json"), built)
}

// mergeIndex adds built to the list in path (replacing entries of the same
// reference), so separate runs for different images keep one list.
func mergeIndex(path string, built []Built) error {
	all := readIndex(path)
	byRef := map[string]int{}
	for i, b := range all {
		byRef[b.Ref] = i
	}
	for _, b := range built {
		if i, ok := byRef[b.Ref]; ok {
			all[i] = b
			continue
		}
		byRef[b.Ref] = len(all)
		all = append(all, b)
	}
	data, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// readIndex is the list in images.json (none if it is missing or broken:
// it is rewritten).
func readIndex(path string) []Built {
	var all []Built
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &all); err != nil {
			return nil
		}
	}
	return all
}

// upToDate reports whether archive exists and was built from inputs.
func upToDate(archive, inputs string) bool {
	if _, err := os.Stat(archive); err != nil {
		return false
	}
	b, err := os.ReadFile(archive + ".inputs")
	return err == nil && strings.TrimSpace(string(b)) == inputs
}

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
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations on the OCI index entry of an image: containerd's import
// (ctr images import) names the image after io.containerd.image.name; the
// OCI one carries the tag, as the image-spec says.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationOCIRefName     = "org.opencontainers.image.ref.name"
)

// builder makes the images of one run; the base layer is shared.
type builder struct {
	tmp   string
	mtime time.Time
	base  v1.Layer
}

func newBuilder(tmp string, mtime time.Time) (*builder, error) {
	b := &builder{tmp: tmp, mtime: mtime}
	es, err := baseEntries()
	if err != nil {
		return nil, err
	}
	if b.base, err = b.layer("base", es); err != nil {
		return nil, err
	}
	return b, nil
}

// layer writes es as a tar file and makes a gzip-compressed OCI layer of it.
func (b *builder) layer(name string, es []entry) (v1.Layer, error) {
	f, err := os.CreateTemp(b.tmp, name+"-*.tar")
	if err != nil {
		return nil, err
	}
	if err := writeLayerTar(f, es, b.mtime); err != nil {
		f.Close()
		return nil, fmt.Errorf("layer %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	// BestSpeed: a kube-apiserver is ~100 MB; the default level triples
	// the time for a few percent.
	return tarball.LayerFromFile(f.Name(), tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithMediaType(types.OCILayer))
}

// image assembles s: the base layer, the binary's layer, the config.
func (b *builder) image(s Spec) (v1.Image, error) {
	es, err := binaryEntries(s.Binary, s.Path)
	if err != nil {
		return nil, err
	}
	bin, err := b.layer(filepath.Base(s.Path), es)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	ports := map[string]struct{}{}
	for _, p := range s.ExposedPorts {
		ports[p] = struct{}{}
	}
	if len(ports) == 0 {
		ports = nil
	}
	cfg := &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: b.mtime},
		Config: v1.Config{
			User:       s.User,
			Entrypoint: s.Entrypoint,
			WorkingDir: s.WorkingDir,
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
			},
			ExposedPorts: ports,
			Labels: map[string]string{
				"org.opencontainers.image.source": "https://sigs.k8s.io/peerdiscovery",
				"org.opencontainers.image.title":  filepath.Base(s.Path),
			},
		},
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img,
		mutate.Addendum{Layer: b.base, History: v1.History{Created: cfg.Created, CreatedBy: "base: users, CA certificates, time zones (distroless/static nonroot)"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: cfg.Created, CreatedBy: "COPY " + filepath.Base(s.Binary) + " " + s.Path}},
	)
}

// writeArchive writes img as an OCI image layout (oci-layout, index.json,
// blobs/) packed in one tar file at path, the format `ctr images import`
// and `docker load` (25+) read.
func (b *builder) writeArchive(img v1.Image, s Spec, path string) error {
	dir, err := os.MkdirTemp(b.tmp, "layout-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	_, tag, _ := splitRef(s.Ref)
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		annotationContainerdName: s.Ref,
		annotationOCIRefName:     tag,
	})); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := tarDir(f, dir, b.mtime); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// tarDir packs the files of an OCI layout directory, sorted, with fixed
// times.
func tarDir(w io.Writer, dir string, mtime time.Time) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Mode: 0o644, Format: tar.FormatPAX}
		if st.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Size = tar.TypeReg, st.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, h.Size)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// uncompressedSize is the size of l's uncompressed tar stream.
func uncompressedSize(l v1.Layer) (int64, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(io.Discard, rc)
}

// inputsDigest identifies what an image is built from: its spec, its
// binary's content, the base layer and the files' time. An archive built
// from the same inputs is not written again.
func (b *builder) inputsDigest(s Spec) (string, error) {
	h := sha256.New()
	spec, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	base, err := b.base.Digest()
	if err != nil {
		return "", err
	}
	self, err := selfDigest()
	if err != nil {
		return "", err
	}
	// The builder itself too: a change to how images are made rebuilds
	// them.
	fmt.Fprintf(h, "builder %s\nspec %s\nbase %s\nmtime %d\nbinary ", self, spec, base, b.mtime.Unix())
	f, err := os.Open(s.Binary)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// selfDigest is the sha256 of this program's executable.
func selfDigest() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

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
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The base layer stands in for gcr.io/distroless/static-debian12:nonroot,
// the Dockerfile's base, which cannot be pulled here: the same users and
// groups, nsswitch.conf, Debian's CA bundle and time zones (taken from this
// machine's ca-certificates and tzdata packages), /tmp and the nonroot
// home. No shell, no package manager, no other executable.

const passwd = `root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
`

const group = `root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
`

const nsswitch = `passwd: files
group: files
hosts: files dns
`

// Host files copied into the base layer, and whether each must exist.
var hostFiles = []struct {
	src, dst string
	required bool
}{
	{"/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt", true},
	{"/usr/share/zoneinfo", "/usr/share/zoneinfo", false},
}

// entry is one file of a layer.
type entry struct {
	hdr  tar.Header
	src  string // regular files: read from here
	data []byte // ... or these bytes
}

func dir(name string, mode int64, uid int) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid}}
}

func file(name string, mode int64, data string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: []byte(data)}
}

// baseEntries are the base layer's files.
func baseEntries() ([]entry, error) {
	es := []entry{
		dir("etc", 0o755, 0),
		file("etc/passwd", 0o644, passwd),
		file("etc/group", 0o644, group),
		file("etc/nsswitch.conf", 0o644, nsswitch),
		dir("etc/ssl", 0o755, 0),
		dir("etc/ssl/certs", 0o755, 0),
		dir("home", 0o755, 0),
		dir("home/nonroot", 0o700, 65532),
		dir("root", 0o700, 0),
		dir("tmp", 0o1777, 0),
		dir("usr", 0o755, 0),
		dir("usr/local", 0o755, 0),
		dir("usr/local/bin", 0o755, 0),
		dir("usr/share", 0o755, 0),
		dir("var", 0o755, 0),
	}
	for _, hf := range hostFiles {
		st, err := os.Lstat(hf.src)
		if err != nil {
			if !hf.required && os.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("base layer: %w", err)
		}
		if !st.IsDir() {
			es = append(es, entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(hf.dst, "/"), Mode: 0o644, Size: st.Size()}, src: hf.src})
			continue
		}
		err = filepath.WalkDir(hf.src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(hf.src, p)
			name := strings.TrimPrefix(filepath.Join(hf.dst, rel), "/")
			info, err := d.Info()
			if err != nil {
				return err
			}
			switch {
			case d.IsDir():
				es = append(es, dir(name, 0o755, 0))
			case info.Mode()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				es = append(es, entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}})
			case info.Mode().IsRegular():
				// Data files only: never an executable bit.
				es = append(es, entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: info.Size()}, src: p})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("base layer: %w", err)
		}
	}
	return es, nil
}

// binaryEntries is the layer with the image's one binary at path (its
// parent directories are in the base layer).
func binaryEntries(src, path string) ([]entry, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", src)
	}
	return []entry{{hdr: tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path, "/"), Mode: 0o755, Size: st.Size()}, src: src}}, nil
}

// writeLayerTar writes es as an uncompressed tar, sorted by name, with
// every time set to mtime and no user or group names, so the same inputs
// give the same layer digest.
func writeLayerTar(w io.Writer, es []entry, mtime time.Time) error {
	sort.SliceStable(es, func(i, j int) bool { return es[i].hdr.Name < es[j].hdr.Name })
	tw := tar.NewWriter(w)
	for _, e := range es {
		h := e.hdr
		h.ModTime, h.AccessTime, h.ChangeTime = mtime, time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if h.Typeflag == tar.TypeReg && e.data == nil {
			// The size now, in case the file changed since it was listed.
			st, err := os.Stat(e.src)
			if err != nil {
				return err
			}
			h.Size = st.Size()
		}
		if err := tw.WriteHeader(&h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if e.data != nil {
			if _, err := tw.Write(e.data); err != nil {
				return err
			}
			continue
		}
		f, err := os.Open(e.src)
		if err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, h.Size)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", e.src, err)
		}
	}
	return tw.Close()
}

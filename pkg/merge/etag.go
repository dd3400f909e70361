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

package merge

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

// ETag returns upstream's ETag for a list: the SHA-512 of the encoding/json
// encoding of APIGroupDiscoveryList{Items: groups}, in upper-case hex
// (k8s.io/apiserver v0.37.2 package aggregated, calculateETag, called with the
// whole list by (*peerAggregatedDiscoveryHandler).fetchFromCache). It is the
// bare hash; upstream quotes it in the ETag header (ServeHTTPWithETag).
//
// nil and empty groups hash differently ("items":null vs "items":[]), as
// upstream's do; Merge never returns nil.
func ETag(groups []apidiscoveryv2.APIGroupDiscovery) (string, error) {
	// json.Encoder writes Marshal's bytes plus a newline; hashing them as they
	// are written, minus the newline, avoids Marshal's copy of the document.
	w := &hashWriter{h: sha512.New()}
	if err := json.NewEncoder(w).Encode(apidiscoveryv2.APIGroupDiscoveryList{Items: groups}); err != nil {
		return "", err
	}
	if !w.pending || w.last != '\n' {
		return "", errors.New("merge: unexpected JSON encoder output")
	}
	return strings.ToUpper(hex.EncodeToString(w.h.Sum(nil))), nil
}

// hashWriter hashes everything but the last byte written so far.
type hashWriter struct {
	h       hash.Hash
	last    byte
	pending bool
}

func (w *hashWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if w.pending {
		w.h.Write([]byte{w.last})
	}
	w.h.Write(p[:len(p)-1])
	w.last, w.pending = p[len(p)-1], true
	return len(p), nil
}

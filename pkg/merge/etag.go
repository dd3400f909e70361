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
// (k8s.io/apiserver v0.37.2 pkg/endpoints/discovery/aggregated/etag.go:78-85,
// called with the whole list at peer_aggregated_handler.go:141-144). It is the
// bare hash; upstream quotes it in the ETag header (etag.go:50).
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

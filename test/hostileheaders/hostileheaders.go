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

// Package hostileheaders lists request header sets with which a client may
// try to change the identity that a kube-apiserver's peer proxy passes on:
// a Connection header naming identity, loop and audit headers (a proxy that
// sets them before its hop-by-hop stripping loses them), and spoofed
// identity and impersonation values. The filter's unit tests and the
// end-to-end suite send the same table.
package hostileheaders

import (
	"net/http"
	"net/url"
	"strings"
)

// Set is one hostile header set.
type Set struct {
	Name   string
	Header http.Header
	// HTTP1Only: the set has connection-specific headers, which HTTP/2
	// forbids (RFC 9113 §8.2.2): Go's HTTP/2 client refuses to send them
	// and its server refuses to accept them.
	HTTP1Only bool
	// Impersonates: the set asks the first server to impersonate
	// (Impersonate-User and friends), which it authorizes itself before any
	// proxying: a client without the impersonate verb gets 403 there.
	Impersonates bool
}

// ExtraHeader is the X-Remote-Extra-* header of extra key, escaped as
// client-go's authenticating proxy round tripper and the filter escape it.
func ExtraHeader(key string) string {
	return "X-Remote-Extra-" + strings.ReplaceAll(url.PathEscape(key), "%2F", "%2f")
}

// Sets returns the table for a user with the given extra keys. Every set
// is meant to leave the peer seeing exactly the first server's
// authenticated user, the loop header and the first server's Audit-ID.
func Sets(extraKeys ...string) []Set {
	tokens := []string{"X-Remote-User", "X-Remote-Group", "X-Remote-Uid"}
	for _, k := range extraKeys {
		tokens = append(tokens, ExtraHeader(k))
	}
	tokens = append(tokens, "X-Kubernetes-Peer-Proxied", "Audit-Id")

	var sets []Set
	conn := func(name string, values ...string) {
		sets = append(sets, Set{Name: name, Header: http.Header{"Connection": values}, HTTP1Only: true})
	}
	// The Connection header naming each header, each pair, and all.
	for i, a := range tokens {
		conn("connection names "+a, a)
		for _, b := range tokens[i+1:] {
			conn("connection names "+a+" and "+b, a+", "+b)
		}
	}
	conn("connection names every one", strings.Join(tokens, ", "))
	// Spelling: case, whitespace, empty items, several Connection lines,
	// next to the ordinary options.
	for _, a := range tokens[:3] {
		conn("connection names lower-case "+a, strings.ToLower(a))
		conn("connection names upper-case "+a, strings.ToUpper(a))
	}
	conn("connection with blanks and empty items", " ,X-Remote-Uid ,, "+tokens[len(tokens)-1]+" , ")
	conn("two Connection lines", "X-Remote-User", "X-Remote-Group")
	conn("keep-alive and X-Remote-Group", "keep-alive, X-Remote-Group")
	conn("close and X-Remote-User", "close, X-Remote-User")
	sets = append(sets, Set{
		Name:      "Keep-Alive and Proxy-Connection naming identity headers",
		Header:    http.Header{"Keep-Alive": {"X-Remote-Group"}, "Proxy-Connection": {"X-Remote-User"}, "Connection": {"Keep-Alive, Proxy-Connection"}},
		HTTP1Only: true,
	})

	// Spoofed identity values, alone and with the Connection header
	// naming them (which would strip the real ones and leave none).
	spoofs := []Set{
		{Name: "spoofed X-Remote-User", Header: http.Header{"X-Remote-User": {"system:admin"}}},
		{Name: "spoofed X-Remote-Group", Header: http.Header{"X-Remote-Group": {"system:masters"}}},
		{Name: "spoofed X-Remote-Uid", Header: http.Header{"X-Remote-Uid": {"spoofed-uid"}}},
		{Name: "spoofed lower-case x-remote-user", Header: http.Header{"x-remote-user": {"system:admin"}}},
		{Name: "spoofed loop header false", Header: http.Header{"X-Kubernetes-Peer-Proxied": {"false"}}},
		{Name: "spoofed Idempotency-Key", Header: http.Header{"Idempotency-Key": {"k1"}, "X-Idempotency-Key": {"k2"}}},
		{Name: "spoofed unknown Impersonate- header", Header: http.Header{"Impersonate-Nothing": {"system:admin"}}},
		{Name: "every identity header spoofed", Header: http.Header{
			"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters", "admins"}, "X-Remote-Uid": {"spoofed-uid"},
		}},
	}
	for _, k := range extraKeys {
		spoofs = append(spoofs, Set{Name: "spoofed extra " + k, Header: http.Header{ExtraHeader(k): {"spoofed"}}})
	}
	spoofs = append(spoofs, Set{Name: "spoofed extra of a new key", Header: http.Header{ExtraHeader("spoofed.example/key"): {"spoofed"}}})
	for _, s := range spoofs {
		sets = append(sets, s)
		with := s.Header.Clone()
		var names []string
		for k := range s.Header {
			names = append(names, k)
		}
		with["Connection"] = []string{strings.Join(names, ", ")}
		sets = append(sets, Set{Name: s.Name + ", named by Connection", Header: with, HTTP1Only: true})
	}
	// Impersonation the client is not allowed to ask for.
	sets = append(sets,
		Set{Name: "Impersonate-User system:admin", Header: http.Header{"Impersonate-User": {"system:admin"}}, Impersonates: true},
		Set{Name: "Impersonate-User and Impersonate-Group", Header: http.Header{"Impersonate-User": {"system:admin"}, "Impersonate-Group": {"system:masters"}}, Impersonates: true},
		Set{Name: "Impersonate-Uid and extra without a user", Header: http.Header{"Impersonate-Uid": {"u"}, "Impersonate-Extra-Scopes": {"all"}}, Impersonates: true},
	)
	return sets
}

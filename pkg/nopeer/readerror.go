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

package nopeer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// ErrorType classifies failures to read a server's own discovery; the
// peer engine uses it as the "type" label of
// apiserver_peer_discovery_sync_errors_total and as the Ready condition
// reason.
type ErrorType string

// Read failure types.
const (
	ErrRefused    ErrorType = "ConnectionRefused"
	ErrTLS        ErrorType = "TLSError"
	ErrTimeout    ErrorType = "Timeout"
	ErrStatus     ErrorType = "UnexpectedStatus"
	ErrRedirect   ErrorType = "Redirect"
	ErrDecode     ErrorType = "UndecodableDocument"
	ErrMediaType  ErrorType = "UnexpectedContentType"
	ErrInvalid    ErrorType = "InvalidDocument"
	ErrOversized  ErrorType = "OversizedDocument"
	ErrConnection ErrorType = "ConnectionError"
)

// ReadError is a classified failure of Client.
type ReadError struct {
	Type ErrorType
	Path string
	Err  error
}

func (e *ReadError) Error() string { return fmt.Sprintf("%s %s: %v", e.Type, e.Path, e.Err) }
func (e *ReadError) Unwrap() error { return e.Err }

// TypeOf returns err's ErrorType, ErrConnection when it has none.
func TypeOf(err error) ErrorType {
	var re *ReadError
	if errors.As(err, &re) {
		return re.Type
	}
	return ErrConnection
}

func classify(ctx context.Context, err error) ErrorType {
	var verifyErr *tls.CertificateVerificationError
	var authErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		return ErrTimeout
	case errors.As(err, &netErr) && netErr.Timeout():
		return ErrTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return ErrRefused
	case errors.As(err, &verifyErr), errors.As(err, &authErr), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return ErrTLS
	case strings.Contains(err.Error(), "tls: "):
		// TLS alerts (e.g. the peer rejected our client certificate) have
		// no exported type.
		return ErrTLS
	}
	return ErrConnection
}

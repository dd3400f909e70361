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

package proxy

import (
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/utils/clock"
)

// Certificates are the reloaders of the peer CA and of the front-proxy
// client certificate, for the filter's tests that change the files.
func (p *Proxier) Certificates() (*dynamiccertificates.DynamicFileCAContent, *dynamiccertificates.DynamicCertKeyPairContent) {
	return p.ca, p.clientCert
}

// TransportsID identifies the current connection pools: it changes when a
// CA reload rebuilt them.
func (p *Proxier) TransportsID() any { return p.transports.Load() }

// SetClock replaces the clock, before the first request: for the filter's
// tests with a fake one, which the checks before each attempt must read.
func (p *Proxier) SetClock(c clock.WithTickerAndDelayedExecution) { p.clock = c }

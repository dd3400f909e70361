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

package server

import (
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// anonymousOnlyFor keeps anonymous access to the given paths (kubelets
// probe health without credentials) and turns it into a 401 everywhere
// else. The delegating authenticator of k8s.io/apiserver always allows
// anonymous requests and ignores DelegatingAuthenticationOptions.Anonymous.
func anonymousOnlyFor(inner authenticator.Request, paths ...string) authenticator.Request {
	if inner == nil {
		return nil
	}
	allowed := make(map[string]bool, len(paths))
	for _, p := range paths {
		allowed[p] = true
	}
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := inner.AuthenticateRequest(req)
		if ok && resp != nil && resp.User != nil && resp.User.GetName() == user.Anonymous && !allowed[req.URL.Path] {
			return nil, false, nil
		}
		return resp, ok, err
	})
}

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

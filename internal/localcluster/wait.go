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

package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// waitFor polls check every 250ms until it succeeds, the process exits or
// ctx is done; errors carry the last observation and the log tail.
func (c *Cluster) waitFor(ctx context.Context, p *process, what string, check func(context.Context) (bool, string)) error {
	last := ""
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, detail := check(cctx)
		cancel()
		if ok {
			return nil
		}
		if detail != "" {
			last = detail
		}
		if p != nil {
			if err := p.exitErr(); err != nil {
				return fmt.Errorf("waiting for %s: %w; last lines of %s:\n%s", what, err, p.logPath, p.logTail(30))
			}
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("waiting for %s: %v", what, ctx.Err())
			if last != "" {
				msg += "; last response: " + strings.TrimSpace(last)
			}
			if p != nil {
				if errs := p.logErrors(10); errs != "" {
					msg += fmt.Sprintf("; last errors in %s:\n%s\n", p.logPath, errs)
				}
				msg += fmt.Sprintf("; last lines of %s:\n%s", p.logPath, p.logTail(20))
			}
			return errors.New(msg)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitReadyz polls the /readyz of the component at cfg.Host (run by p)
// until it answers 200.
func (c *Cluster) waitReadyz(ctx context.Context, p *process, name string, cfg *rest.Config) error {
	start := time.Now()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	err = c.waitFor(ctx, p, name+" /readyz", func(ctx context.Context) (bool, string) {
		return httpOK(ctx, client, cfg.Host+"/readyz?verbose")
	})
	if err == nil {
		c.cfg.Logf("%s ready in %s", name, time.Since(start).Round(100*time.Millisecond))
	}
	return err
}

// httpOK GETs url and reports whether it answered 200, and what it said.
func httpOK(ctx context.Context, client *http.Client, url string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, failedChecks(string(body)))
	}
	return true, ""
}

// failedChecks keeps the [-] lines of a verbose /readyz body (all of it if
// there are none).
func failedChecks(body string) string {
	var bad []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "[-]") {
			bad = append(bad, l)
		}
	}
	if len(bad) == 0 {
		return strings.TrimSpace(body)
	}
	return strings.Join(bad, "; ")
}

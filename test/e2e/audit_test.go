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

package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	AuditID        string                    `json:"auditID"`
	Verb           string                    `json:"verb"`
	User           authenticationv1.UserInfo `json:"user"`
	Annotations    map[string]string         `json:"annotations"`
	ResponseStatus struct {
		Code int32 `json:"code"`
	} `json:"responseStatus"`
	ObjectRef struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
}

// readAudit reads the ResponseComplete events on StorageVersionMigrations
// of an audit log, by Audit-ID.
func readAudit(t *testing.T, path string) map[string]auditEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]auditEvent{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"storageversionmigrations"`) || !strings.Contains(sc.Text(), `"ResponseComplete"`) {
			continue
		}
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out[ev.AuditID] = ev
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

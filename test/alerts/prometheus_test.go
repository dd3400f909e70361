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

package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"sigs.k8s.io/yaml"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

const (
	monitoringDir = "../../artifacts/monitoring/"
	// forDivisor shortens every rule's `for` as much as the local plane
	// shortens --tombstone-period (60s for the default 10m).
	forDivisor = 10
	// How often Prometheus scrapes and evaluates here (the shipped jobs use
	// the global interval).
	scrapeInterval = 5 * time.Second

	// Where the shipped scrape jobs expect Prometheus' credentials: in a
	// Pod, its ServiceAccount's token and the cluster CA, and the
	// APIService's caBundle mounted from a ConfigMap.
	podTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	podCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
	podExtCAFile = "/etc/prometheus/configmaps/peerdiscovery-apiserver-ca/ca.crt"

	// The identity rbac.yaml binds.
	promNamespace      = "monitoring"
	promServiceAccount = "prometheus"
)

// rule is one alerting rule of alerts.yaml.
type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

// shippedRules reads alerts.yaml.
func shippedRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(monitoringDir + "alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	return rf
}

// burnAlerts are the error-budget burn alerts: their rate windows (1h
// and 5m, 6h and 30m) are divided by forDivisor here, as their `for` is,
// so that each burns through its budget in a tenth of the time.
var burnAlerts = map[string]bool{burnFast: true, burnSlow: true}

// rangeWindow is a range selector's duration in a rule's expression.
var rangeWindow = regexp.MustCompile(`\[\d+[smh]\]`)

// e2eExpr is the expression run here for a shipped rule: the shipped one,
// with the windows of the burn alerts divided by forDivisor (in seconds).
func e2eExpr(t testing.TB, r rule) string {
	t.Helper()
	if !burnAlerts[r.Alert] {
		return r.Expr
	}
	n := 0
	expr := rangeWindow.ReplaceAllStringFunc(r.Expr, func(w string) string {
		d, err := time.ParseDuration(w[1 : len(w)-1])
		if err != nil || d%(forDivisor*time.Second) != 0 {
			t.Fatalf("%s: window %s cannot be divided by %d", r.Alert, w, forDivisor)
		}
		n++
		return fmt.Sprintf("[%ds]", int((d / forDivisor).Seconds()))
	})
	if n == 0 {
		t.Fatalf("%s: a burn alert without a rate window", r.Alert)
	}
	return expr
}

// e2eRules is alerts.yaml with every `for` divided by forDivisor, and the
// burn alerts' rate windows too (e2eExpr); nothing else changed: the
// rest of the expressions, the labels and annotations are the shipped
// ones.
func e2eRules(t *testing.T, rf ruleFile) ruleFile {
	t.Helper()
	out := rf
	out.Groups = nil
	for _, g := range rf.Groups {
		ng := g
		ng.Rules = nil
		for _, r := range g.Rules {
			d, err := time.ParseDuration(r.For)
			if err != nil || d <= 0 {
				t.Fatalf("%s: for %q is not a Go duration", r.Alert, r.For)
			}
			r.For = fmt.Sprintf("%ds", int((d / forDivisor).Seconds()))
			r.Expr = e2eExpr(t, r)
			ng.Rules = append(ng.Rules, r)
		}
		out.Groups = append(out.Groups, ng)
	}
	return out
}

// prometheus is a Prometheus server running in the plane's network
// namespace, and a client of its HTTP API.
type prometheus struct {
	base   string
	dir    string
	client *http.Client
}

// startPrometheus sets Prometheus up as an admin would in a cluster (the
// ServiceAccount, rbac.yaml, a token, the APIService's CA), writes its
// configuration from the shipped files and starts it inside the plane's
// network namespace, where it scrapes the components by their addresses.
// The only changes to prometheus-scrape.yaml are the paths of the
// credentials (a Pod's, elsewhere here) and a kubeconfig for service
// discovery (a Pod's in-cluster configuration is not available outside one).
func startPrometheus(t *testing.T, c *localcluster.Cluster, binary string, rules ruleFile) *prometheus {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(c.RunDir(), "prometheus")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cs := planetest.Kube(t, c.AdminConfig(old))

	// The admin's part: the identity and its RBAC, a token for it, the CA
	// of the APIService.
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: promNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().ServiceAccounts(promNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: promServiceAccount}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if out, err := c.Kubectl("apply", "-f", monitoringDir+"rbac.yaml"); err != nil {
		t.Fatalf("kubectl apply -f rbac.yaml: %v\n%s", err, out)
	}
	exp := int64((3 * time.Hour).Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(promNamespace).CreateToken(ctx, promServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, []byte(tr.Status.Token))
	agg, err := aggregatorclient.NewForConfig(c.AdminConfig(old))
	if err != nil {
		t.Fatal(err)
	}
	as, err := agg.ApiregistrationV1().APIServices().Get(ctx, localcluster.APIServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(as.Spec.CABundle) == 0 {
		t.Fatalf("APIService %s has no caBundle", localcluster.APIServiceName)
	}
	extCAFile := filepath.Join(dir, "peerdiscovery-apiserver-ca.crt")
	writeFile(t, extCAFile, as.Spec.CABundle)

	// Service discovery from outside a Pod: the API through the plane's
	// load balancer, the cluster CA, the same token.
	sdKubeconfig := filepath.Join(dir, "sd.kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["plane"] = &clientcmdapi.Cluster{Server: c.LoadBalancerEndpoint(), CertificateAuthority: c.CAFile()}
	kc.AuthInfos["prometheus"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	kc.Contexts["plane"] = &clientcmdapi.Context{Cluster: "plane", AuthInfo: "prometheus"}
	kc.CurrentContext = "plane"
	if err := clientcmd.WriteToFile(*kc, sdKubeconfig); err != nil {
		t.Fatal(err)
	}

	scrapeFile := filepath.Join(dir, "peerdiscovery-scrape.yaml")
	writeFile(t, scrapeFile, scrapeConfig(t, map[string]string{
		podTokenFile: tokenFile,
		podCAFile:    c.CAFile(),
		podExtCAFile: extCAFile,
	}, sdKubeconfig))
	data, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, "peerdiscovery-alerts.yaml")
	writeFile(t, rulesFile, append([]byte(fmt.Sprintf("# alerts.yaml with every `for` divided by %d (test/alerts)\n", forDivisor)), data...))
	configFile := filepath.Join(dir, "prometheus.yml")
	writeFile(t, configFile, []byte(fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: 4s
  evaluation_interval: %[1]s
rule_files: [%[2]q]
scrape_config_files: [%[3]q]
`, scrapeInterval, rulesFile, scrapeFile)))

	addr := net.JoinHostPort(c.HelperAddress(), "9090")
	stop, err := c.RunInNetwork("prometheus", binary,
		"--config.file="+configFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=info")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Logf("stopping prometheus: %v", err)
		}
	})
	p := &prometheus{base: "http://" + addr, dir: dir, client: &http.Client{Timeout: 10 * time.Second}}
	planetest.WaitFor(t, time.Minute, "prometheus ready (log: "+filepath.Join(c.RunDir(), "logs", "prometheus.log")+")", func() error {
		resp, err := p.client.Get(p.base + "/-/ready")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
	return p
}

// scrapeConfig is prometheus-scrape.yaml with the in-Pod paths replaced
// (each must be there) and kubeconfig for every service discovery.
func scrapeConfig(t *testing.T, paths map[string]string, kubeconfig string) []byte {
	t.Helper()
	data, err := os.ReadFile(monitoringDir + "prometheus-scrape.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if strings.Contains(text, "insecure_skip_verify") {
		t.Fatal("prometheus-scrape.yaml mentions insecure_skip_verify")
	}
	for from, to := range paths {
		if !strings.Contains(text, from) {
			t.Fatalf("prometheus-scrape.yaml does not use %s: the docs and this test expect it", from)
		}
		text = strings.ReplaceAll(text, from, to)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) == 0 {
		t.Fatal("prometheus-scrape.yaml has no scrape_configs")
	}
	for _, j := range jobs {
		job := j.(map[string]any)
		sds, _ := job["kubernetes_sd_configs"].([]any)
		if len(sds) == 0 {
			t.Fatalf("job %v: no kubernetes_sd_configs", job["job_name"])
		}
		for _, sd := range sds {
			sd.(map[string]any)["kubeconfig_file"] = kubeconfig
		}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// get reads one answer of Prometheus' HTTP API into data.
func (p *prometheus) get(path string, query url.Values, data any) error {
	u := p.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	resp, err := p.client.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %s: %.200s", path, resp.Status, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

// alerts is /api/v1/alerts: every pending and firing alert.
func (p *prometheus) alerts() ([]promAlert, error) {
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	err := p.get("/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

type promTarget struct {
	Labels    map[string]string `json:"labels"`
	ScrapeURL string            `json:"scrapeUrl"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
}

// targets is /api/v1/targets' active targets.
func (p *prometheus) targets() ([]promTarget, error) {
	var data struct {
		Active []promTarget `json:"activeTargets"`
	}
	err := p.get("/api/v1/targets", url.Values{"state": {"active"}}, &data)
	return data.Active, err
}

// metricNames is /api/v1/label/__name__/values: every metric name stored.
func (p *prometheus) metricNames() ([]string, error) {
	var names []string
	err := p.get("/api/v1/label/__name__/values", nil, &names)
	return names, err
}

// sample is one series of an instant query's answer.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// queryVector evaluates an instant query and returns its series.
func (p *prometheus) queryVector(q string) ([]sample, error) {
	var data struct {
		ResultType string   `json:"resultType"`
		Result     []sample `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {q}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("%s: result type %s", q, data.ResultType)
	}
	return data.Result, nil
}

// query evaluates an instant query and returns how many series it gave.
func (p *prometheus) query(q string) (int, error) {
	var data struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {q}}, &data); err != nil {
		return 0, err
	}
	if data.ResultType != "vector" {
		return 0, fmt.Errorf("%s: result type %s", q, data.ResultType)
	}
	return len(data.Result), nil
}

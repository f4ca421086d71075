package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v4"

	"astro/events/natsserver"
)

// TestDeployNATSConfig holds deploy/nats-server.conf to the embedded
// server's users and permissions, which TestNATSSecurity proves.
func TestDeployNATSConfig(t *testing.T) {
	for _, v := range []string{"ASTRO_NATS_PASSWORD", "NATS_CONSUMER_PASSWORD", "NATS_SERVICE_PASSWORD"} {
		t.Setenv(v, "pw-"+v)
	}
	opts, err := server.ProcessConfigFile("../../deploy/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	if opts.NoAuthUser != "" || opts.Username != "" || opts.Authorization != "" {
		t.Fatalf("the config lets someone in without a user of its own")
	}
	var names []string
	for _, u := range opts.Users {
		names = append(names, u.Username)
		if u.Password != "pw-"+map[string]string{
			natsserver.UserAstro: "ASTRO_NATS_PASSWORD", natsserver.UserConsumer: "NATS_CONSUMER_PASSWORD", natsserver.UserService: "NATS_SERVICE_PASSWORD",
		}[u.Username] {
			t.Errorf("%s: password not from the environment", u.Username)
		}
		want, got := natsserver.Permissions(u.Username, protectedConsumers()), u.Permissions
		if (want == nil) != (got == nil) {
			t.Fatalf("%s: permissions %+v, want %+v", u.Username, got, want)
		}
		if want == nil {
			continue
		}
		same := func(a, b *server.SubjectPermission) bool {
			if a == nil || b == nil {
				return a == b
			}
			return slices.Equal(a.Allow, b.Allow) && slices.Equal(a.Deny, b.Deny)
		}
		if !same(want.Publish, got.Publish) || !same(want.Subscribe, got.Subscribe) || got.Response != nil {
			t.Errorf("%s: permissions differ from the embedded server's\n got publish %+v subscribe %+v\nwant publish %+v subscribe %+v",
				u.Username, got.Publish, got.Subscribe, want.Publish, want.Subscribe)
		}
	}
	if want := []string{natsserver.UserAstro, natsserver.UserConsumer, natsserver.UserService}; !slices.Equal(names, want) {
		t.Fatalf("users %v, want %v", names, want)
	}
}

// deployDocs parses every YAML document of a file under deploy/.
func deployDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []map[string]any
	dec := yaml.NewDecoder(f)
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: not valid YAML: %v", path, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// TestDeployFilesParse holds every YAML and JSON file under deploy/ to its
// syntax.
func TestDeployFilesParse(t *testing.T) {
	var n int
	err := filepath.WalkDir("../../deploy", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml":
			if len(deployDocs(t, path)) == 0 {
				t.Errorf("%s: no document", path)
			}
			n++
		case ".json":
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !json.Valid(raw) {
				t.Errorf("%s: not valid JSON", path)
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 6 {
		t.Errorf("only %d YAML and JSON files under deploy/", n)
	}
}

// dig follows keys (strings into maps, ints into lists) through a parsed
// document; nil when a step is missing.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// TestDeployKubernetes checks the production shape: Astro as 2+ replicas
// with its probes on a JetStream cluster of 3 with replicated streams, and
// the cluster's users exactly deploy/nats-server.conf.
func TestDeployKubernetes(t *testing.T) {
	byKind := map[string]map[string]any{}
	for _, file := range []string{"astro.yaml", "nats.yaml", "postgres.yaml"} {
		for _, d := range deployDocs(t, "../../deploy/kubernetes/"+file) {
			byKind[fmt.Sprint(d["kind"], "/", dig(d, "metadata", "name"))] = d
		}
	}
	astro := byKind["Deployment/astro"]
	if astro == nil {
		t.Fatal("no Deployment astro")
	}
	if r, _ := dig(astro, "spec", "replicas").(int); r < 2 {
		t.Errorf("astro replicas %v, want 2 or more", dig(astro, "spec", "replicas"))
	}
	c := dig(astro, "spec", "template", "spec", "containers", 0)
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz", "startupProbe": "/healthz"} {
		if got := dig(c, probe, "httpGet", "path"); got != path {
			t.Errorf("astro %s path %v, want %s", probe, got, path)
		}
	}
	env := map[string]string{}
	for _, e := range dig(c, "env").([]any) {
		v, ok := dig(e, "value").(string)
		if !ok && dig(e, "valueFrom") != nil {
			v = "from-a-secret-" + strings.Repeat("x", 32) // long enough for a key
		}
		env[fmt.Sprint(dig(e, "name"))] = v
	}
	if env["ASTRO_STREAM_REPLICAS"] != "3" {
		t.Errorf("ASTRO_STREAM_REPLICAS %v, want 3 on the cluster", env["ASTRO_STREAM_REPLICAS"])
	}
	// Every replica the same ticket key: a browser's stream ticket from one
	// opens the stream on another (each would make its own otherwise).
	for _, name := range []string{"ASTRO_NATS_URL", "ASTRO_DATABASE_URL", "ASTRO_NATS_PASSWORD", "ASTRO_METRICS_ADDR", "ASTRO_STREAM_TICKET_KEY"} {
		if _, ok := env[name]; !ok {
			t.Errorf("astro has no %s", name)
		}
	}
	cfg, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Errorf("astro's environment is not a valid configuration: %v", err)
	}
	// A terminating pod goes on serving until it has left the Service's
	// endpoints, then shuts down within its grace, and all of it before
	// Kubernetes kills it.
	sleep, _ := dig(c, "lifecycle", "preStop", "sleep", "seconds").(int)
	period, _ := dig(astro, "spec", "template", "spec", "terminationGracePeriodSeconds").(int)
	if sleep < 3 {
		t.Errorf("astro's preStop sleep is %v s, want 3 s or more while its endpoint is removed", dig(c, "lifecycle", "preStop"))
	}
	if need := time.Duration(sleep)*time.Second + cfg.ShutdownGrace + 5*time.Second; time.Duration(period)*time.Second < need {
		t.Errorf("terminationGracePeriodSeconds %d, want at least %v: the preStop sleep, the shutdown grace and a margin", period, need)
	}
	nats := byKind["StatefulSet/nats"]
	if r := dig(nats, "spec", "replicas"); r != 3 {
		t.Errorf("nats replicas %v, want a cluster of 3", r)
	}
	conf, _ := dig(byKind["ConfigMap/nats-config"], "data", "nats-server.conf").(string)
	want, err := os.ReadFile("../../deploy/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	if conf != string(want) {
		t.Errorf("the nats-config ConfigMap differs from deploy/nats-server.conf")
	}
	if byKind["Service/postgres"] == nil {
		t.Errorf("no Service postgres naming the external database")
	}
}

// metricRef finds the metric names a rule or a panel queries.
var metricRef = regexp.MustCompile(`\b(?:astro|go|process)_[a-z0-9_]+`)

// TestDeployMetricsExist scrapes a running Astro and finds there every
// metric the alert rules and the dashboard name, so that a renamed metric
// cannot leave a silent alert or an empty panel.
func TestDeployMetricsExist(t *testing.T) {
	var exprs []string
	for _, g := range dig(deployDocs(t, "../../deploy/prometheus/alerts.yml")[0], "groups").([]any) {
		for _, r := range dig(g, "rules").([]any) {
			exprs = append(exprs, fmt.Sprint(dig(r, "expr")))
		}
	}
	prom := deployDocs(t, "../../deploy/prometheus/prometheus.yml")[0]
	if files := fmt.Sprint(dig(prom, "rule_files")); !strings.Contains(files, "alerts.yml") {
		t.Errorf("prometheus.yml does not load alerts.yml: %s", files)
	}
	raw, err := os.ReadFile("../../deploy/grafana/astro-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}

	s := startService(t)
	sc := s.scrape(s.base + "/metrics")
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricRef.FindAllString(e, -1) {
			if seen[name] {
				continue
			}
			seen[name] = true
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && sc[b] != nil && sc[b].GetType() == dto.MetricType_HISTOGRAM {
					base = b
				}
			}
			if sc[base] == nil {
				t.Errorf("%s is named by a rule or panel but not exposed by Astro", name)
			}
		}
	}
	if len(seen) < 15 {
		t.Errorf("only %d metrics named by the rules and the dashboard", len(seen))
	}
}

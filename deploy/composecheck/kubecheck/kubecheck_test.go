package kubecheck

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/deploy/composecheck"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

var update = flag.Bool("update", false, "rewrite deploy/kubernetes/base/prometheusrule.yaml from deploy/prometheus/alerts.yml")

const (
	kubeDir    = "../../kubernetes"
	dockerfile = "../../compose/Dockerfile"
	alertsFile = "../../prometheus/alerts.yml"
)

// randomKeys is a secrets.env as gen-secrets.sh writes it, from Go's
// generators: every key of the right shape.
func randomKeys(t *testing.T) string {
	t.Helper()
	b64 := func(n int) string {
		b := make([]byte, n)
		_, err := rand.Read(b)
		require.NoError(t, err)
		return base64.StdEncoding.EncodeToString(b)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	admin := make([]byte, 24)
	_, err = rand.Read(admin)
	require.NoError(t, err)
	return strings.Join([]string{
		"WR_TOKEN_KEY=" + b64(48),
		"WR_ADMISSION_KEY=" + b64(32),
		"WR_ADMISSION_KEYS_EXTRA=",
		"WR_POW_KEY=" + b64(48),
		"WR_ADMIN_TOKEN=" + hex.EncodeToString(admin),
		"WR_BYPASS_KEY=" + base64.StdEncoding.EncodeToString(priv.Seed()),
		"WR_BYPASS_PUBLIC_KEY=" + base64.StdEncoding.EncodeToString(pub),
		"WR_DRAW_KEY=" + b64(32),
	}, "\n") + "\n"
}

// baseFS is an in-memory copy of deploy/kubernetes at /k8s (without a
// secrets.env an operator may have written there), plus secrets as given.
func baseFS(t *testing.T, secrets string) filesys.FileSystem {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	err := filepath.WalkDir(kubeDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "secrets.env" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(kubeDir, path)
		if err != nil {
			return err
		}
		return fs.WriteFile(filepath.Join("/k8s", rel), b)
	})
	require.NoError(t, err)
	if secrets != "" {
		require.NoError(t, fs.WriteFile("/k8s/base/secrets.env", []byte(secrets)))
	}
	return fs
}

func binaries(t *testing.T) []string {
	t.Helper()
	df, err := composecheck.ParseDockerfile(dockerfile)
	require.NoError(t, err)
	require.NotEmpty(t, df.Binaries)
	return df.Binaries
}

// check renders fs's base, decodes and checks it; a render or decode
// failure is returned as the only error.
func check(t *testing.T, fs filesys.FileSystem) (Objects, []error) {
	t.Helper()
	return checkDir(t, fs, "/k8s/base")
}

func checkDir(t *testing.T, fs filesys.FileSystem, dir string) (Objects, []error) {
	t.Helper()
	out, err := Render(fs, dir)
	if err != nil {
		return Objects{}, []error{err}
	}
	o, err := Decode(out)
	if err != nil {
		return o, []error{err}
	}
	return o, Check(o, binaries(t))
}

func TestBaseAgreesWithCode(t *testing.T) {
	o, errs := check(t, baseFS(t, randomKeys(t)))
	require.Empty(t, errs, "%v", errors.Join(errs...))

	// What the check walked: without these it would pass on an empty base.
	kinds := map[string]int{}
	for _, w := range o.Workloads() {
		for _, c := range w.Pod.Spec.Containers {
			kinds[w.Kind+" "+c.Command[0]]++
		}
	}
	require.Equal(t, map[string]int{
		"Deployment waitroom-api": 1, "Deployment waitroom-notifier": 1, "Deployment waitroom-scheduler": 1,
		"StatefulSet waitroom-consumer": 1, "Job waitroomctl": 1,
	}, kinds)
	require.Equal(t, []string{"waitroomctl", "topics", "ensure"}, o.Jobs[0].Spec.Template.Spec.Containers[0].Command)
	require.Len(t, o.Secrets, 1)
	require.Len(t, o.PDBs, 4)
	require.Len(t, o.Custom["ServiceMonitor"], 1)
	require.Len(t, o.Custom["PrometheusRule"], 1)
}

// TestCheckCatches breaks the base one way at a time and expects the check
// to say so: a check that cannot fail proves nothing.
func TestCheckCatches(t *testing.T) {
	keys := func(t *testing.T) string { return randomKeys(t) }
	cases := []struct {
		name    string
		file    string // edited in place; empty: only the secrets change
		old     string
		new     string
		secrets func(t *testing.T) string
		want    string
	}{
		{name: "typo'd variable", file: "api.yaml", old: "- name: WR_API_ADDR", new: "- name: WR_API_ADRR",
			want: "sets WR_API_ADRR, which waitroom-api does not read"},
		{name: "variable of another binary", file: "notifier.yaml", old: "- name: WR_NOTIFIER_ADDR\n              value: 0.0.0.0:8090",
			new:  "- name: WR_NOTIFIER_ADDR\n              value: 0.0.0.0:8090\n            - name: WR_POW_TTL\n              value: 1m",
			want: "sets WR_POW_TTL, which waitroom-notifier does not read"},
		{name: "missing secret reference", file: "api.yaml",
			old:  "            - name: WR_POW_KEY\n              valueFrom:\n                secretKeyRef: { name: waitroom-keys, key: WR_POW_KEY }\n",
			want: "reads WR_POW_KEY but takes it from no Secret"},
		{name: "scheduler without its admin token", file: "scheduler.yaml",
			old:  "            - name: WR_ADMIN_TOKEN\n              valueFrom:\n                secretKeyRef: { name: waitroom-keys, key: WR_ADMIN_TOKEN }\n",
			want: "reads WR_ADMIN_TOKEN but takes it from no Secret"},
		{name: "secret as a literal", file: "scheduler.yaml",
			old:  "            - name: WR_DRAW_KEY\n              valueFrom:\n                secretKeyRef: { name: waitroom-keys, key: WR_DRAW_KEY }\n",
			new:  "            - name: WR_DRAW_KEY\n              value: a-draw-key-in-the-manifest\n",
			want: "WR_DRAW_KEY is a secret: take it from a Secret"},
		{name: "key missing from the Secret", secrets: func(t *testing.T) string {
			s := keys(t)
			return s[strings.Index(s, "\n")+1:] // drop WR_TOKEN_KEY
		}, want: "names key WR_TOKEN_KEY of Secret"},
		{name: "api and notifier on different keys", file: "notifier.yaml", old: "key: WR_ADMISSION_KEY }", new: "key: WR_DRAW_KEY }",
			want: "disagree on WR_ADMISSION_KEY"},
		{name: "bypass pair that does not match", secrets: func(t *testing.T) string {
			s := keys(t)
			i := strings.Index(s, "WR_BYPASS_PUBLIC_KEY=")
			j := i + strings.Index(s[i:], "\n")
			return s[:i] + "WR_BYPASS_PUBLIC_KEY=" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + s[j:]
		}, want: "WR_BYPASS_PUBLIC_KEY is not the public half"},
		{name: "invalid value", file: "scheduler.yaml", old: "value: 0.0.0.0:8082", new: "value: 0.0.0.0:8082\n            - name: WR_SCHEDULER_SHARDS\n              value: \"0\"",
			want: "WR_SCHEDULER_SHARDS must be in 1..64"},
		{name: "unknown field", file: "api.yaml", old: "  replicas: 2", new: "  replica: 2",
			want: `unknown field "replica"`},
		{name: "mistyped field", file: "consumer.yaml", old: "  replicas: 2", new: "  replicas: two",
			want: "strict decode"},
		{name: "loopback listener", file: "notifier.yaml", old: "value: 0.0.0.0:8090", new: "value: 127.0.0.1:8090",
			want: "listens on 127.0.0.1 only"},
		{name: "listener not set", file: "consumer.yaml", old: "            - name: WR_CONSUMER_ADDR\n              value: 0.0.0.0:8081\n",
			want: "WR_CONSUMER_ADDR is not set"},
		{name: "readiness on /healthz", file: "api.yaml", old: "httpGet: { path: /readyz, port: http }", new: "httpGet: { path: /healthz, port: http }",
			want: "readiness probe on /healthz, want /readyz"},
		{name: "probe on another port", file: "notifier.yaml", old: "httpGet: { path: /healthz, port: http }\n            periodSeconds: 10",
			new: "httpGet: { path: /healthz, port: 8080 }\n            periodSeconds: 10", want: "liveness probe on port 8080"},
		{name: "Service to the wrong port", file: "scheduler.yaml", old: "      port: 8082\n      targetPort: http", new: "      port: 8082\n      targetPort: 9000",
			want: "no Service selects its pods on port 8082"},
		{name: "consumer id not the pod name", file: "consumer.yaml", old: "valueFrom:\n                fieldRef: { fieldPath: metadata.name }", new: "value: consumer-1",
			want: "WR_CONSUMER_INSTANCE_ID must come from the pod's name"},
		{name: "one scheduler", file: "scheduler.yaml", old: "  replicas: 2", new: "  replicas: 1",
			want: "1 pods run waitroom-scheduler, want at least 2"},
		{name: "no disruption budget", file: "notifier.yaml", old: "kind: PodDisruptionBudget\nmetadata:\n  name: waitroom-notifier\nspec:\n  minAvailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: waitroom-notifier",
			new:  "kind: PodDisruptionBudget\nmetadata:\n  name: waitroom-notifier\nspec:\n  minAvailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: waitroom-other",
			want: "no PodDisruptionBudget covers its pods"},
		{name: "no memory request", file: "topics-job.yaml", old: "requests: { cpu: 50m, memory: 32Mi }", new: "requests: { cpu: 50m }",
			want: "no cpu or memory request"},
		{name: "buffered event stream", file: "ingress.yaml", old: `proxy-buffering: "off"`, new: `proxy-buffering: "on"`,
			want: "buffers the event stream"},
		{name: "read timeout under the heartbeat", file: "ingress.yaml", old: `proxy-read-timeout: "3600"`, new: `proxy-read-timeout: "20"`,
			want: `proxy-read-timeout="20"`},
		{name: "events route to the api", file: "ingress.yaml", old: "name: waitroom-notifier", new: "name: waitroom-api",
			want: "goes to Service waitroom-api, which does not select the waitroom-notifier pods"},
		{name: "events route that misses the stream", file: "ingress.yaml", old: "/registrations/[^/]+/events$", new: "/registrations/[^/]+/stream$",
			want: "does not select the waitroom-notifier pods"},
		{name: "trusted proxies unset", file: "api.yaml", old: "            - name: WR_TRUSTED_PROXIES\n              value: 10.0.0.0/8\n",
			want: "WR_TRUSTED_PROXIES is not set"},
		{name: "trusting everyone", file: "api.yaml", old: "value: 10.0.0.0/8", new: "value: 0.0.0.0/0",
			want: "trusts 0.0.0.0/0, every address"},
		{name: "metrics not scraped", file: "servicemonitor.yaml", old: "port: http", new: "port: metrics",
			want: "no ServiceMonitor scrapes /metrics"},
		{name: "one service on another Redis", file: "scheduler.yaml", old: "value: 0.0.0.0:8082", new: "value: 0.0.0.0:8082\n            - name: WR_REDIS_ADDR\n              value: redis-2:6379",
			want: "WR_REDIS_ADDR differs between containers"},
		{name: "consumer group the console does not watch", file: "consumer.yaml", old: "value: 0.0.0.0:8081", new: "value: 0.0.0.0:8081\n            - name: WR_CONSUMER_GROUP\n              value: shop-consumer",
			want: "WR_CONSUMER_GROUP differs between containers"},
		{name: "a binary the image lacks", file: "topics-job.yaml", old: `command: ["waitroomctl", "topics", "ensure"]`, new: `command: ["waitroom-ctl", "topics", "ensure"]`,
			want: `runs no known binary`},
		{name: "no secrets file", secrets: func(*testing.T) string { return "" }, want: "secrets.env"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			secrets := keys(t)
			if tc.secrets != nil {
				secrets = tc.secrets(t)
			}
			fs := baseFS(t, secrets)
			if tc.file != "" {
				path := "/k8s/base/" + tc.file
				b, err := fs.ReadFile(path)
				require.NoError(t, err)
				require.Contains(t, string(b), tc.old, "the case edits nothing: the base changed under it")
				require.NoError(t, fs.WriteFile(path, []byte(strings.Replace(string(b), tc.old, tc.new, 1))))
			}
			_, errs := check(t, fs)
			require.NotEmpty(t, errs)
			require.Contains(t, fmt.Sprint(errs), tc.want)
		})
	}
}

// TestExampleOverlay renders the example overlay (what an operator copies)
// and checks it as the base, and that its settings took.
func TestExampleOverlay(t *testing.T) {
	o, errs := checkDir(t, baseFS(t, randomKeys(t)), "/k8s/example")
	require.Empty(t, errs, "%v", errors.Join(errs...))
	ws := o.Workloads()
	require.Len(t, ws, 5)
	for _, w := range ws {
		require.Equal(t, "registry.example.com/waitroom:v1.0.0", w.Pod.Spec.Containers[0].Image, w.Name)
	}
	for _, ing := range o.Ingresses {
		require.Equal(t, "waitroom", ing.Namespace)
		require.Equal(t, "queue.shop.example", ing.Spec.Rules[0].Host)
		require.Equal(t, []string{"queue.shop.example"}, ing.Spec.TLS[0].Hosts)
	}
	api, _ := find(o.Deployments, "waitroom-api")
	var trusted []string
	for _, e := range api.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "WR_TRUSTED_PROXIES" {
			trusted = append(trusted, e.Value)
		}
	}
	require.Equal(t, []string{"10.244.0.0/16"}, trusted)
	require.Len(t, o.ConfigMaps, 1)
	require.Equal(t, "redis-master.data:6379", o.ConfigMaps[0].Data["WR_REDIS_ADDR"])
	require.Equal(t, "json", o.ConfigMaps[0].Data["WR_LOG_FORMAT"], "the overlay merges into the base's settings")
}

func TestPrometheusRuleIsAlerts(t *testing.T) {
	alerts, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	want := PrometheusRule(alerts)
	path := filepath.Join(kubeDir, "base", "prometheusrule.yaml")
	if *update {
		require.NoError(t, os.WriteFile(path, want, 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "deploy/kubernetes/base/prometheusrule.yaml is stale: go test ./deploy/composecheck/kubecheck -run PrometheusRule -update")
}

// TestGenSecrets runs gen-secrets.sh and renders the base with its keys: the
// bypass pair it derives with openssl must match, every key must load.
func TestGenSecrets(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed: gen-secrets.sh needs it")
	}
	out := filepath.Join(t.TempDir(), "secrets.env")
	script, err := filepath.Abs(filepath.Join(kubeDir, "base", "gen-secrets.sh"))
	require.NoError(t, err)
	b, err := exec.Command(script, out).CombinedOutput()
	require.NoError(t, err, "%s", b)
	secrets, err := os.ReadFile(out)
	require.NoError(t, err)
	_, errs := check(t, baseFS(t, string(secrets)))
	require.Empty(t, errs, "%v", errors.Join(errs...))

	b, err = exec.Command(script, out).CombinedOutput()
	require.Error(t, err, "a second run must not overwrite the keys")
	require.Contains(t, string(b), "exists")
	again, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, secrets, again)
}

package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/topics"
	"go.yaml.in/yaml/v3"
)

// metricName is a waitroom metric in a PromQL expression (label values such
// as waitroom.registrations have a dot, not an underscore).
var metricName = regexp.MustCompile(`\bwaitroom_[a-z0-9_]+\b`)

// monitoringQueries are the PromQL expressions of deploy/'s alert rules and
// Grafana dashboard, by where they come from.
func monitoringQueries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	b, err := os.ReadFile("../../../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(b, &rules), "alerts.yml")
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert+r.Record] = r.Expr
		}
	}
	b, err = os.ReadFile("../../../deploy/grafana/waitroom.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	require.NoError(t, json.Unmarshal(b, &dash), "the dashboard is JSON")
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out["panel "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		out["variable "+v.Name] = v.Definition
	}
	return out
}

// exported scrapes url's /metrics and returns every metric name in it
// (histograms under their _bucket, _sum and _count names and their own).
func exported(t *testing.T, c *http.Client, url string, into map[string]bool) {
	t.Helper()
	resp, err := c.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			into[f[2]] = true
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		into[line[:strings.IndexAny(line, "{ ")]] = true
	}
	require.NoError(t, sc.Err())
}

// Every metric the alert rules and the dashboard query is exported by a
// running service: the stack runs with an item in line, admissions, a
// completion, a dead letter and a steered item, so the labelled series
// exist too; then the
// /metrics of the api, the consumer, the notifier and every scheduler are
// read. A rule on a misspelt or removed metric would never fire.
func TestMonitoringNamesOnlyExportedMetrics(t *testing.T) {
	queries := monitoringQueries(t)
	want := map[string][]string{} // metric → where it is queried
	for where, q := range queries {
		for _, m := range metricName.FindAllString(q, -1) {
			want[m] = append(want[m], where)
		}
	}
	require.Contains(t, want, "waitroom_scheduler_leader", "the queries were read")

	// A steered item with someone in line: its controller's series exist.
	paced := policy("paced", 5, 10, 60)
	paced.Policy.MaxRate, paced.Policy.Steer = 5, &topics.SteerPolicy{TargetP95Ms: 300}
	e := newEnv(t, policy("mon", 5, 10, 60), paced)
	e.start()
	for _, u := range []string{"m1", "m2", "m3"} {
		e.register("mon", u)
	}
	e.register("paced", "p1")
	tok := e.admit("mon", "m4")
	a := e.admissionCall("/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: tok, ItemID: "mon"})
	require.Equal(t, http.StatusOK, a.Code, "%s", a.Body)
	// A record that is no message: the consumer dead-letters it.
	require.NoError(t, e.kcl.ProduceSync(context.Background(), &kgo.Record{Topic: topics.Registrations, Key: []byte("mon"), Value: []byte("not json")}).FirstErr())

	urls := append([]string{e.stack.APIURL, e.stack.ConsumerURL, e.stack.NotifierURL}, e.stack.SchedulerURLs...)
	var missing []string
	have := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		have = map[string]bool{}
		for _, u := range urls {
			exported(t, e.http, u, have)
		}
		missing = missing[:0]
		for m := range want {
			if !have[m] {
				missing = append(missing, m)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("%s is queried by %v but no service exports it", m, want[m])
	}
	assert.Greater(t, len(want), 10, "the rules and the dashboard query many metrics: %v", want)
	assert.False(t, have["waitroom_no_such_metric"], "the scrape is no blanket yes")
}

package composecheck

import (
	"context"
	"go.yaml.in/yaml/v3"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	composeFile = "../compose/compose.yaml"
	dockerfile  = "../compose/Dockerfile"
	caddyfile   = "../compose/Caddyfile"
)

// keyEnv is what an operator exports before `docker compose up`.
var keyEnv = map[string]string{
	"WR_TOKEN_KEY":     "test-only-hmac-key-of-at-least-32-bytes-0123456789",
	"WR_ADMISSION_KEY": "dGVzdC1vbmx5LWVkMjU1MTktc2VlZC0zMi1ieXRlcyE=", // 32 bytes
	"WR_ADMIN_TOKEN":   "test-only-admin-token-of-32-bytes-or-more",    // MinAdminToken
}

func load(t *testing.T) (*types.Project, Dockerfile, FrontDoor) {
	t.Helper()
	p, err := Load(context.Background(), composeFile, keyEnv)
	require.NoError(t, err)
	df, err := ParseDockerfile(dockerfile)
	require.NoError(t, err)
	fd, err := AdaptCaddyfile(context.Background(), caddyfile)
	require.NoError(t, err, "caddy validates the Caddyfile (make deps installs caddy)")
	return p, df, fd
}

func TestComposeFileAgreesWithTheCode(t *testing.T) {
	p, df, fd := load(t)
	for _, err := range Check(p, df, fd) {
		t.Error(err)
	}
	// The stack the issue asks for, by binary.
	byBinary := map[string][]string{}
	for _, a := range Apps(p) {
		byBinary[a.Binary] = append(byBinary[a.Binary], a.Service.Name)
	}
	t.Logf("services by binary: %v", byBinary)
	assert.Len(t, byBinary["waitroom-scheduler"], 3)
	assert.GreaterOrEqual(t, len(byBinary["waitroom-api"]), 2)
	for _, s := range []string{"redis", "kafka-1", "kafka-2", "kafka-3", "front"} {
		assert.Contains(t, p.Services, s)
	}
}

// Every binary the config map knows is built by the Dockerfile, and every
// main package under services/ (but the dev stack) is in the map: a new
// service cannot be forgotten here.
func TestEveryServiceBinaryIsKnownAndBuilt(t *testing.T) {
	df, err := ParseDockerfile(dockerfile)
	require.NoError(t, err)
	for bin := range Binaries {
		assert.Contains(t, df.Binaries, bin)
	}
	mains, err := filepath.Glob("../../services/*/main.go")
	require.NoError(t, err)
	require.NotEmpty(t, mains)
	for _, m := range mains {
		dir := filepath.Base(filepath.Dir(m))
		if dir == "dev" {
			continue
		}
		built := regexp.MustCompile(`-o\s+/out/(\S+)\s+\./services/` + dir + `\b`).FindStringSubmatch(readFile(t, dockerfile))
		if assert.NotNil(t, built, "the Dockerfile builds ./services/%s", dir) {
			assert.Contains(t, Binaries, built[1], "composecheck knows the config of %s", built[1])
		}
	}
}

// The Dockerfile copies the go.mod of every module go.work uses, before
// `go mod download` (else: "cannot load module ... listed in go.work file").
func TestDockerfileCopiesEveryWorkspaceModule(t *testing.T) {
	df, err := ParseDockerfile(dockerfile)
	require.NoError(t, err)
	uses := regexp.MustCompile(`(?m)^\s*\./(\S+)\s*$`).FindAllStringSubmatch(readFile(t, "../../go.work"), -1)
	require.NotEmpty(t, uses)
	for _, u := range uses {
		assert.Contains(t, df.Copied, u[1]+"/go.mod", "COPY of %s/go.mod", u[1])
	}
}

// The keys have no default in the file: without them compose refuses to load
// it, naming the variable; with them every service that reads one gets it.
func TestKeysComeFromTheEnvironment(t *testing.T) {
	for _, k := range Keys {
		env := map[string]string{}
		for kk, v := range keyEnv {
			if kk != k {
				env[kk] = v
			}
		}
		_, err := Load(context.Background(), composeFile, env)
		if assert.Error(t, err, "loads without %s", k) {
			assert.Contains(t, err.Error(), k)
		}
	}
	p, _, _ := load(t)
	readers := map[string]int{}
	for _, a := range Apps(p) {
		for _, k := range Keys {
			if v, ok := a.Env[k]; ok {
				assert.Equal(t, keyEnv[k], v, "%s: %s", a.Service.Name, k)
				readers[k]++
			}
		}
	}
	for _, k := range Keys {
		assert.Positive(t, readers[k], "some service gets %s", k)
	}
}

// The checker itself: each kind of mistake it exists for is reported.
func TestCheckFindsMistakes(t *testing.T) {
	cases := map[string]struct {
		edit func(p *types.Project, fd *FrontDoor)
		want string
	}{
		"a misspelt env var": {func(p *types.Project, _ *FrontDoor) {
			setEnv(p, "api-1", "WR_API_ADRR", "0.0.0.0:8080")
		}, "api-1: sets WR_API_ADRR, which waitroom-api does not read"},
		"an env var of another service": {func(p *types.Project, _ *FrontDoor) {
			setEnv(p, "consumer", "WR_SSE_HEARTBEAT", "5s")
		}, "consumer: sets WR_SSE_HEARTBEAT"},
		"a value that does not load": {func(p *types.Project, _ *FrontDoor) {
			setEnv(p, "scheduler-2", "WR_SCHEDULER_TICK", "fast")
		}, `scheduler-2: load promote.Config`},
		"a listener on loopback": {func(p *types.Project, _ *FrontDoor) {
			setEnv(p, "consumer", "WR_CONSUMER_ADDR", "127.0.0.1:8081")
		}, "listens on 127.0.0.1 only"},
		"a published port nobody listens on": {func(p *types.Project, _ *FrontDoor) {
			setEnv(p, "scheduler-3", "WR_SCHEDULER_ADDR", "0.0.0.0:9000")
		}, "scheduler-3: publishes container port 8082 but listens on 9000"},
		"a missing key": {func(p *types.Project, _ *FrontDoor) {
			delete(p.Services["notifier-2"].Environment, "WR_ADMISSION_KEY")
		}, "notifier-2: waitroom-notifier reads WR_ADMISSION_KEY but the file does not set it"},
		"a host that is no service": {func(p *types.Project, _ *FrontDoor) {
			setEnv(p, "api-2", "WR_REDIS_ADDR", "cache:6379")
		}, `api-2: WR_REDIS_ADDR names host "cache"`},
		"a wrong peer port": {func(p *types.Project, _ *FrontDoor) {
			setEnv(p, "consumer", "WR_KAFKA_BROKERS", "kafka-1:9999")
		}, "kafka-1 does not listen on 9999"},
		"a dependency not waited for": {func(p *types.Project, _ *FrontDoor) {
			s := p.Services["notifier-1"]
			s.DependsOn = types.DependsOnConfig{"topics": s.DependsOn["topics"]}
			p.Services["notifier-1"] = s
		}, "notifier-1: WR_REDIS_ADDR names redis, but notifier-1 does not depend on it"},
		"a healthcheck not waited for": {func(p *types.Project, _ *FrontDoor) {
			s := p.Services["api-1"]
			s.DependsOn["redis"] = types.ServiceDependency{Condition: types.ServiceConditionStarted, Required: true}
			p.Services["api-1"] = s
		}, "api-1: depends on redis"},
		"too few schedulers": {func(p *types.Project, _ *FrontDoor) {
			delete(p.Services, "scheduler-3")
		}, "2 services run waitroom-scheduler, want at least 3"},
		"an unknown binary": {func(p *types.Project, _ *FrontDoor) {
			s := p.Services["consumer"]
			s.Command = types.ShellCommand{"waitroom-consumr"}
			p.Services["consumer"] = s
		}, `consumer: command ["waitroom-consumr"] runs no known binary`},
		"a replica missing from the front door": {func(_ *types.Project, fd *FrontDoor) {
			fd.Rest = fd.Rest[:1]
		}, "front door: the waitroom-api route goes to"},
		"a buffered events route": {func(_ *types.Project, fd *FrontDoor) {
			fd.EventsFlush = 0
		}, "the events route buffers"},
		"a front door port Caddy does not listen on": {func(p *types.Project, _ *FrontDoor) {
			s := p.Services["front"]
			s.Ports = []types.ServicePortConfig{{Target: 80, Published: "8000"}}
			p.Services["front"] = s
		}, "front door: front publishes container ports [:80], Caddy listens on [:8000]"},
		"an events route that takes API calls": {func(_ *types.Project, fd *FrontDoor) {
			fd.EventsPath = regexp.MustCompile(`^/api/v1/items/`)
		}, "also takes /api/v1/items/concert-2026/registrations"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p, df, fd := load(t)
			c.edit(p, &fd)
			var msgs []string
			for _, err := range Check(p, df, fd) {
				msgs = append(msgs, err.Error())
			}
			assert.Contains(t, strings.Join(msgs, "\n"), c.want)
		})
	}
}

func setEnv(p *types.Project, service, k, v string) {
	s := p.Services[service]
	env := types.MappingWithEquals{}
	for kk, vv := range s.Environment {
		env[kk] = vv
	}
	env[k] = &v
	s.Environment = env
	p.Services[service] = s
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// Caddy itself judges the Caddyfile: a directive it does not know, or a
// module option it refuses, fails the check.
func TestCaddyRefusesABrokenCaddyfile(t *testing.T) {
	good := readFile(t, caddyfile)
	for name, broken := range map[string]string{
		"unknown lb_policy": strings.Replace(good, "lb_policy least_conn", "lb_policy fastest_please", 1),
		"unknown directive": strings.Replace(good, "flush_interval -1", "flush_everything now", 1),
		"unbalanced braces": strings.Replace(good, "handle {", "handle {{", 1),
	} {
		t.Run(name, func(t *testing.T) {
			require.NotEqual(t, good, broken)
			path := filepath.Join(t.TempDir(), "Caddyfile")
			require.NoError(t, os.WriteFile(path, []byte(broken), 0o600))
			_, err := AdaptCaddyfile(context.Background(), path)
			assert.Error(t, err)
		})
	}
}

// deploy/prometheus/prometheus.yml (the compose Prometheus) scrapes every
// service with a listener, on the port it listens on, and nothing else.
func TestPrometheusScrapesEveryService(t *testing.T) {
	p, _, _ := load(t)
	b, err := os.ReadFile("../prometheus/prometheus.yml")
	require.NoError(t, err)
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal(b, &cfg))
	scraped := map[string]string{} // service → port
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				host, port, err := net.SplitHostPort(tg)
				require.NoError(t, err, tg)
				require.Contains(t, p.Services, host, "job %s scrapes %s, which compose.yaml does not run", sc.JobName, tg)
				scraped[host] = port
			}
		}
	}
	n := 0
	for _, a := range Apps(p) {
		addr := a.Env[listenKey(a.Config)]
		if a.Config == nil || addr == "" {
			continue // waitroomctl, the topics job: no listener
		}
		_, port, err := net.SplitHostPort(addr)
		require.NoError(t, err, addr)
		assert.Equal(t, port, scraped[a.Service.Name], "%s listens on %s: Prometheus must scrape it there", a.Service.Name, addr)
		n++
	}
	assert.GreaterOrEqual(t, n, 8, "every api, consumer, scheduler and notifier replica")
}

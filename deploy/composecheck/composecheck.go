// Package composecheck checks deploy/compose against the code, since no Docker
// engine runs in CI: it loads compose.yaml with compose-go (the library docker
// compose itself uses) and checks every service of the waitroom image: the
// binary it runs is built by the Dockerfile, every env var it sets is one that
// binary's config struct reads (the names come from the struct tags, through
// the same env library the services load with), the values load and
// validate, it listens on all interfaces on the port it publishes, the hosts it
// names exist and are waited for in depends_on, and the Caddy front door
// (adapted and validated by the caddy binary itself) sends the page, the API
// and the event streams to the right replicas.
package composecheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/caarlos0/env/v11"
	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	ctl "github.com/waitroom/waitroom/services/ctl/cli"

	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/services/scheduler/promote"
)

// Binaries maps each binary of the image to the config it loads from the
// environment (what its main passes to config.Load).
var Binaries = map[string]any{
	"waitroom-api":       httpapi.Config{},
	"waitroom-consumer":  ingest.Config{},
	"waitroom-scheduler": promote.Config{},
	"waitroom-notifier":  sse.Config{},
	"waitroomctl":        ctl.Env{},
}

// MinReplicas is how many services must run each binary: two api replicas
// behind the front door, three schedulers (one leads, two stand by), at least
// one consumer and notifier. waitroomctl runs once, as the topics job.
var MinReplicas = map[string]int{
	"waitroom-api": 2, "waitroom-consumer": 1, "waitroom-scheduler": 3, "waitroom-notifier": 1, "waitroomctl": 1,
}

// Keys are the secrets that must come from the operator's environment: the
// services fall back to built-in development keys (or an open admin API)
// when they are empty, so every server (a binary with a listener) that reads
// one must set it. waitroomctl, a client, needs the admin token only for the
// admin commands.
var Keys = []string{"WR_TOKEN_KEY", "WR_ADMISSION_KEY", "WR_ADMIN_TOKEN"}

// runtimeEnv is read by the Go runtime of every binary, not by a config struct.
var runtimeEnv = map[string]bool{"GOGC": true, "GOMEMLIMIT": true, "GOMAXPROCS": true, "GODEBUG": true}

// Load loads a compose file with only env for interpolation (never the
// caller's environment), as `docker compose` would.
func Load(ctx context.Context, file string, env map[string]string) (*types.Project, error) {
	kv := make([]string, 0, len(env))
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	opts, err := cli.NewProjectOptions([]string{file}, cli.WithWorkingDirectory(filepath.Dir(file)), cli.WithEnv(kv),
		cli.WithInterpolation(true), cli.WithResolvedPaths(true))
	if err != nil {
		return nil, fmt.Errorf("compose options for %s: %w", file, err)
	}
	p, err := opts.LoadProject(ctx)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", file, err)
	}
	return p, nil
}

// EnvField is one environment variable a config reads.
type EnvField struct {
	Key    string
	Secret bool
}

// EnvFields lists the environment variables cfg's type reads, by key, from
// its struct tags through the env library the services load with.
func EnvFields(cfg any) (map[string]EnvField, error) {
	ptr := reflect.New(reflect.TypeOf(cfg)).Interface()
	params, err := env.GetFieldParams(ptr)
	if err != nil {
		return nil, fmt.Errorf("env fields of %T: %w", cfg, err)
	}
	secret := map[string]bool{}
	walkTags(reflect.TypeOf(cfg), func(f reflect.StructField) {
		if f.Tag.Get("secret") == "true" {
			secret[f.Tag.Get("env")] = true
		}
	})
	out := map[string]EnvField{}
	for _, p := range params {
		out[p.Key] = EnvField{Key: p.Key, Secret: secret[p.Key]}
	}
	return out, nil
}

func walkTags(t reflect.Type, fn func(reflect.StructField)) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Tag.Get("env") == "" {
			walkTags(f.Type, fn)
			continue
		}
		if f.Tag.Get("env") != "" {
			fn(f)
		}
	}
}

// listenKey is the env key of cfg's own listener: its top-level Addr field.
func listenKey(cfg any) string {
	f, ok := reflect.TypeOf(cfg).FieldByName("Addr")
	if !ok {
		return ""
	}
	return f.Tag.Get("env")
}

// LoadConfig fills a new value of cfg's type from environment, exactly as the
// service would at start, and runs its Validate method when it has one.
func LoadConfig(cfg any, environment map[string]string) error {
	ptr := reflect.New(reflect.TypeOf(cfg))
	if err := env.ParseWithOptions(ptr.Interface(), env.Options{Environment: environment}); err != nil {
		return fmt.Errorf("load %T: %w", cfg, err)
	}
	if v, ok := ptr.Elem().Interface().(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("validate %T: %w", cfg, err)
		}
	}
	return nil
}

// Dockerfile is what Check needs of the image's Dockerfile.
type Dockerfile struct {
	Binaries []string // the -o /out/NAME of its go build lines
	Copied   []string // the sources of its COPY lines
}

// ParseDockerfile reads the binaries a Dockerfile builds and what it copies.
func ParseDockerfile(path string) (Dockerfile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Dockerfile{}, fmt.Errorf("read dockerfile: %w", err)
	}
	var d Dockerfile
	for _, m := range regexp.MustCompile(`-o\s+/out/(\S+)`).FindAllStringSubmatch(string(b), -1) {
		d.Binaries = append(d.Binaries, m[1])
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "COPY" || strings.HasPrefix(f[1], "--") {
			continue
		}
		d.Copied = append(d.Copied, f[1:len(f)-1]...)
	}
	return d, nil
}

// FrontDoor is what Check needs of the Caddyfile: the upstreams of the event
// streams' route and of the catch-all route, the events path pattern, and
// the paths the door answers itself.
type FrontDoor struct {
	Events, Rest []string // host:port
	EventsPath   *regexp.Regexp
	EventsFlush  float64        // the events route's flush_interval (-1: every write at once)
	Listen       []string       // the server's listen addresses
	Answered     map[string]int // path (as matched) -> the status the door answers without a proxy
}

// AdaptCaddyfile runs `caddy adapt --validate` on a Caddyfile (Caddy's own
// parser, and its provisioning of every module the file names) and reads the
// front door's routes from the JSON: the route matched by a path_regexp, and
// the catch-all route.
func AdaptCaddyfile(ctx context.Context, path string) (FrontDoor, error) {
	out, err := exec.CommandContext(ctx, "caddy", "adapt", "--config", path, "--adapter", "caddyfile", "--validate").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return FrontDoor{}, fmt.Errorf("caddy adapt %s: %w: %s", path, err, ee.Stderr)
		}
		return FrontDoor{}, fmt.Errorf("caddy adapt %s: %w", path, err)
	}
	return ParseCaddyJSON(out)
}

// ParseCaddyJSON reads a FrontDoor from Caddy's JSON config of one server.
func ParseCaddyJSON(b []byte) (FrontDoor, error) {
	type route struct {
		Match []struct {
			PathRegexp *struct{ Pattern string } `json:"path_regexp"`
			Path       []string
		}
		Handle []json.RawMessage
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string
					Routes []route
				}
			}
		}
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return FrontDoor{}, fmt.Errorf("read caddy json: %w", err)
	}
	if len(cfg.Apps.HTTP.Servers) != 1 {
		return FrontDoor{}, fmt.Errorf("caddy json: want one server, have %d", len(cfg.Apps.HTTP.Servers))
	}
	var fd FrontDoor
	for _, srv := range cfg.Apps.HTTP.Servers {
		fd.Listen = srv.Listen
		for _, r := range srv.Routes {
			var dials []string
			flush, status := 0.0, 0
			for _, h := range r.Handle {
				proxies(h, &dials, &flush, &status)
			}
			switch {
			case len(r.Match) == 1 && len(r.Match[0].Path) > 0 && len(dials) == 0 && status != 0:
				if fd.Answered == nil {
					fd.Answered = map[string]int{}
				}
				for _, path := range r.Match[0].Path {
					fd.Answered[path] = status
				}
			case len(r.Match) == 0:
				fd.Rest = append(fd.Rest, dials...)
			case len(r.Match) == 1 && r.Match[0].PathRegexp != nil && fd.EventsPath == nil:
				re, err := regexp.Compile(r.Match[0].PathRegexp.Pattern)
				if err != nil {
					return fd, fmt.Errorf("events path_regexp: %w", err)
				}
				fd.EventsPath, fd.Events, fd.EventsFlush = re, dials, flush
			default:
				return fd, fmt.Errorf("caddy json: a route the check does not know: %+v", r.Match)
			}
		}
	}
	if fd.EventsPath == nil || len(fd.Events) == 0 || len(fd.Rest) == 0 {
		return fd, errors.New("caddy json: want a path_regexp route to the notifiers and a catch-all route to the api, each with a reverse_proxy")
	}
	return fd, nil
}

// proxies collects the upstreams (and flush_interval) of every reverse_proxy
// handler in h, subroutes included, and the status of a static_response.
func proxies(h json.RawMessage, dials *[]string, flush *float64, status *int) {
	var hd struct {
		Handler       string
		FlushInterval float64     `json:"flush_interval"`
		StatusCode    json.Number `json:"status_code"` // a number or a string
		Upstreams     []struct{ Dial string }
		Routes        []struct{ Handle []json.RawMessage }
	}
	if json.Unmarshal(h, &hd) != nil {
		return
	}
	switch hd.Handler {
	case "reverse_proxy":
		for _, u := range hd.Upstreams {
			*dials = append(*dials, u.Dial)
		}
		*flush = hd.FlushInterval
	case "static_response":
		*status = http.StatusOK // Caddy's default
		if n, err := hd.StatusCode.Int64(); err == nil {
			*status = int(n)
		}
	}
	for _, r := range hd.Routes {
		for _, sub := range r.Handle {
			proxies(sub, dials, flush, status)
		}
	}
}

// App is one service of the waitroom image.
type App struct {
	Service types.ServiceConfig
	Binary  string
	Config  any
	Env     map[string]string
	Port    int // its listener's port (0: none)
}

// Apps returns the services that run the image built from the Dockerfile.
func Apps(p *types.Project) []App {
	images := map[string]bool{}
	for _, s := range p.Services {
		if s.Build != nil {
			images[s.Image] = true
		}
	}
	var out []App
	for _, name := range sortedNames(p) {
		s := p.Services[name]
		if !images[s.Image] {
			continue
		}
		a := App{Service: s, Env: map[string]string{}}
		if len(s.Command) > 0 {
			a.Binary = s.Command[0]
			a.Config = Binaries[a.Binary]
		}
		for k, v := range s.Environment {
			if v != nil {
				a.Env[k] = *v
			}
		}
		out = append(out, a)
	}
	return out
}

func sortedNames(p *types.Project) []string {
	names := make([]string, 0, len(p.Services))
	for n := range p.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Check returns every disagreement between the project and the code.
func Check(p *types.Project, df Dockerfile, front FrontDoor) []error {
	apps := Apps(p)
	count := map[string]int{}
	listen := map[string]int{} // service -> listener port
	var errs []error
	for i := range apps {
		a := &apps[i]
		if a.Config != nil {
			count[a.Binary]++
		}
		errs = append(errs, checkApp(a, df, listen)...)
	}
	for bin, min := range MinReplicas {
		if count[bin] < min {
			errs = append(errs, fmt.Errorf("%d services run %s, want at least %d", count[bin], bin, min))
		}
	}
	errs = append(errs, checkHosts(p, apps, listen)...)
	errs = append(errs, checkDependsOn(p)...)
	errs = append(errs, checkPublished(p)...)
	errs = append(errs, checkFront(p, apps, listen, front)...)
	return errs
}

// checkApp checks one service that runs a binary of ours against the code:
// built by the Dockerfile, every env var it sets read, its keys set, its
// config loading, its listener reachable from other containers (noted in
// listen, and in a.Port) and published as it listens.
func checkApp(a *App, df Dockerfile, listen map[string]int) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	name := a.Service.Name
	if a.Config == nil {
		bad("%s: command %q runs no known binary (want one of %v)", name, []string(a.Service.Command), keys(Binaries))
		return errs
	}
	if !slices.Contains(df.Binaries, a.Binary) {
		bad("%s: the Dockerfile does not build %s", name, a.Binary)
	}
	fields, err := EnvFields(a.Config)
	if err != nil {
		bad("%s: %v", name, err)
		return errs
	}
	for k := range a.Env {
		if _, ok := fields[k]; !ok && !runtimeEnv[k] {
			bad("%s: sets %s, which %s does not read (%T)", name, k, a.Binary, a.Config)
		}
	}
	for _, k := range Keys {
		if _, reads := fields[k]; reads && listenKey(a.Config) != "" && a.Env[k] == "" {
			bad("%s: %s reads %s but the file does not set it (it would fall back to a development key)", name, a.Binary, k)
		}
	}
	if err := LoadConfig(a.Config, a.Env); err != nil {
		bad("%s: %v", name, err)
	}
	if lk := listenKey(a.Config); lk != "" {
		addr, ok := a.Env[lk]
		host, port, err := net.SplitHostPort(addr)
		switch {
		case !ok:
			bad("%s: %s is not set: the default listens on loopback, unreachable from other containers", name, lk)
		case err != nil:
			bad("%s: %s=%q: %v", name, lk, addr, err)
		case host != "" && host != "0.0.0.0" && host != "::":
			bad("%s: %s=%q listens on %s only; containers are reached on all interfaces (0.0.0.0)", name, lk, addr, host)
		default:
			a.Port, _ = strconv.Atoi(port)
			listen[name] = a.Port
		}
	}
	for _, pc := range a.Service.Ports {
		if int(pc.Target) != a.Port {
			bad("%s: publishes container port %d but listens on %d", name, pc.Target, a.Port)
		}
	}
	return errs
}

// checkHosts checks that the hosts named in env values exist, listen there,
// and are waited for.
func checkHosts(p *types.Project, apps []App, listen map[string]int) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, a := range apps {
		for k, v := range a.Env {
			for _, hp := range strings.Split(v, ",") {
				host, port, err := net.SplitHostPort(strings.TrimSpace(hp))
				if err != nil || host == "" || net.ParseIP(host) != nil || host == "localhost" {
					continue
				}
				target, ok := p.Services[host]
				if !ok {
					bad("%s: %s names host %q, which is no service", a.Service.Name, k, host)
					continue
				}
				if !servesPort(target, listen[host], port) {
					bad("%s: %s names %s, but %s does not listen on %s", a.Service.Name, k, hp, host, port)
				}
				if !dependsOn(p, a.Service.Name, host, map[string]bool{}) {
					bad("%s: %s names %s, but %s does not depend on it (directly or through depends_on)", a.Service.Name, k, host, a.Service.Name)
				}
			}
		}
	}
	return errs
}

// checkDependsOn checks that depends_on waits for health where there is a
// healthcheck, for success of one-shot jobs.
func checkDependsOn(p *types.Project) []error {
	var errs []error
	for _, name := range sortedNames(p) {
		for dep, d := range p.Services[name].DependsOn {
			target := p.Services[dep]
			switch {
			case target.HealthCheck != nil && !target.HealthCheck.Disable && d.Condition != types.ServiceConditionHealthy:
				errs = append(errs, fmt.Errorf("%s: depends on %s with %q; it has a healthcheck: wait for service_healthy", name, dep, d.Condition))
			case target.Restart == types.RestartPolicyNo && d.Condition != types.ServiceConditionCompletedSuccessfully:
				errs = append(errs, fmt.Errorf("%s: depends on the one-shot %s with %q; wait for service_completed_successfully", name, dep, d.Condition))
			}
		}
	}
	return errs
}

// checkPublished checks that no host port is published twice.
func checkPublished(p *types.Project) []error {
	var errs []error
	published := map[string]string{}
	for _, name := range sortedNames(p) {
		for _, pc := range p.Services[name].Ports {
			k := pc.HostIP + ":" + pc.Published
			if other, ok := published[k]; ok && pc.Published != "" {
				errs = append(errs, fmt.Errorf("%s and %s both publish host port %s", other, name, k))
			}
			published[k] = name
		}
	}
	return errs
}

// checkFront checks the Caddy routes: every notifier replica (and only those)
// behind the events route, every api replica behind the rest, on their
// listeners, the events pattern matching the notifier's route and not the
// API's, and the front door waiting for all of them.
func checkFront(p *types.Project, apps []App, listen map[string]int, front FrontDoor) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	var door string
	for _, name := range sortedNames(p) {
		if strings.HasPrefix(p.Services[name].Image, "caddy") {
			door = name
		}
	}
	if door == "" {
		return []error{errors.New("no front door: no service runs a caddy image")}
	}
	want := map[string][]string{"waitroom-notifier": nil, "waitroom-api": nil}
	for _, a := range apps {
		if _, ok := want[a.Binary]; ok {
			want[a.Binary] = append(want[a.Binary], net.JoinHostPort(a.Service.Name, strconv.Itoa(listen[a.Service.Name])))
		}
	}
	for bin, got := range map[string][]string{"waitroom-notifier": front.Events, "waitroom-api": front.Rest} {
		w := slices.Sorted(slices.Values(want[bin]))
		g := slices.Sorted(slices.Values(got))
		if !slices.Equal(w, g) {
			bad("front door: the %s route goes to %v, want every %s replica on its listener: %v", bin, g, bin, w)
		}
		for _, u := range got {
			host, _, _ := net.SplitHostPort(u)
			if _, ok := p.Services[door].DependsOn[host]; !ok {
				bad("front door: %s does not depend on %s", door, host)
			}
		}
	}
	if front.Answered["/metrics"] != http.StatusNotFound {
		bad("front door: /metrics reaches the services; the door must answer it 404 itself (Prometheus scrapes each replica inside the network)")
	}
	if front.EventsFlush != -1 {
		bad("front door: the events route buffers (flush_interval %v); Server-Sent Events need -1", front.EventsFlush)
	}
	var doorPorts []string
	for _, pc := range p.Services[door].Ports {
		doorPorts = append(doorPorts, ":"+strconv.Itoa(int(pc.Target)))
	}
	if len(doorPorts) == 0 || !slices.Equal(slices.Sorted(slices.Values(doorPorts)), slices.Sorted(slices.Values(front.Listen))) {
		bad("front door: %s publishes container ports %v, Caddy listens on %v", door, doorPorts, front.Listen)
	}
	events := strings.NewReplacer(":itemId", "concert-2026", ":token", "eyJhbGciOi.x.y").Replace(sse.EventsPath)
	if !front.EventsPath.MatchString(events) {
		bad("front door: the events route %q does not match the notifier's %s", front.EventsPath, events)
	}
	for _, path := range []string{"/api/v1/items/concert-2026/registrations", "/api/v1/items/concert-2026/registrations/eyJhbGciOi.x.y", "/items/concert-2026/wait"} {
		if front.EventsPath.MatchString(path) {
			bad("front door: the events route %q also takes %s, an api path", front.EventsPath, path)
		}
	}
	return errs
}

// servesPort tells whether service s accepts connections on port: its app
// listener, a container port it publishes, or a listener named in its env
// (such as KAFKA_LISTENERS=INTERNAL://:19092).
func servesPort(s types.ServiceConfig, appPort int, port string) bool {
	if appPort != 0 {
		return strconv.Itoa(appPort) == port
	}
	for _, pc := range s.Ports {
		if strconv.Itoa(int(pc.Target)) == port {
			return true
		}
	}
	for _, v := range s.Environment {
		if v != nil && strings.Contains(*v, ":"+port) {
			return true
		}
	}
	return false
}

func dependsOn(p *types.Project, from, to string, seen map[string]bool) bool {
	if seen[from] {
		return false
	}
	seen[from] = true
	for dep := range p.Services[from].DependsOn {
		if dep == to || dependsOn(p, dep, to, seen) {
			return true
		}
	}
	return false
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Package kubecheck checks the kustomize base in deploy/kubernetes against
// the code, without a cluster or a kubectl binary: it renders the base with
// the kustomize library (krusty, what `kubectl kustomize` runs), decodes every
// object strictly into the Kubernetes API types (an unknown or mistyped field
// is an error), and checks what the services need: each container runs a
// binary of the image and sets only variables that binary's config reads
// (composecheck.EnvFields), every key comes from a Secret, the config loads
// and validates, servers listen on all interfaces with their probes,
// Services, disruption budgets and scrape port on that listener, the
// consumers' member ids are their pod names, and the ingress streams events
// unbuffered past the heartbeat.
package kubecheck

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/waitroom/waitroom/deploy/composecheck"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/services/notifier/sse"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Keys are the secrets a server must take from a Secret when its config
// reads them: the token and admission keys (api and notifier), the
// proof-of-work key and the bypass public key (api), the admin token, the
// bypass and draw keys (schedulers). Empty, each falls back to a derived key
// or turns a feature off in silence, which a deployment must not do by
// omission.
var Keys = append(slices.Clone(composecheck.Keys), "WR_POW_KEY", "WR_BYPASS_KEY", "WR_BYPASS_PUBLIC_KEY", "WR_DRAW_KEY")

// MinReplicas is how many pods each long-running binary needs at least: two
// of each stateless server so one survives a node, two schedulers (each
// leads some lock shards; the other takes them over), one consumer.
var MinReplicas = map[string]int32{
	"waitroom-api": 2, "waitroom-notifier": 2, "waitroom-scheduler": 2, "waitroom-consumer": 1,
}

// runtimeEnv is read by the Go runtime, not by a config struct.
var runtimeEnv = map[string]bool{"GOGC": true, "GOMEMLIMIT": true, "GOMAXPROCS": true, "GODEBUG": true}

// Render builds the kustomization in dir of fsys, as `kubectl kustomize`
// would, and returns the YAML stream.
func Render(fsys filesys.FileSystem, dir string) ([]byte, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: as yaml: %w", dir, err)
	}
	return out, nil
}

// Objects are the rendered objects, each decoded into its API type.
type Objects struct {
	Deployments  []appsv1.Deployment
	StatefulSets []appsv1.StatefulSet
	Jobs         []batchv1.Job
	Services     []corev1.Service
	ConfigMaps   []corev1.ConfigMap
	Secrets      []corev1.Secret
	PDBs         []policyv1.PodDisruptionBudget
	Ingresses    []networkingv1.Ingress
	// Custom resources of the Prometheus Operator, by kind.
	Custom map[string][]map[string]any
}

// customKinds are the custom resources the base may hold, with the spec
// fields each must have (their CRDs are not Go types here).
var customKinds = map[string][]string{
	"monitoring.coreos.com/v1 ServiceMonitor": {"selector", "endpoints"},
	"monitoring.coreos.com/v1 PrometheusRule": {"groups"},
}

// Decode splits a YAML stream and decodes each document strictly into the
// Kubernetes type of its apiVersion and kind: a field the type does not
// have, a duplicate field or a value of the wrong type is an error, and so
// is a kind the base has no business holding.
func Decode(stream []byte) (Objects, error) {
	o := Objects{Custom: map[string][]map[string]any{}}
	var errs []error
	for i, doc := range bytes.Split(stream, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			continue
		}
		gvk := tm.APIVersion + " " + tm.Kind
		var err error
		switch gvk {
		case "apps/v1 Deployment":
			err = decodeInto(doc, &o.Deployments)
		case "apps/v1 StatefulSet":
			err = decodeInto(doc, &o.StatefulSets)
		case "batch/v1 Job":
			err = decodeInto(doc, &o.Jobs)
		case "v1 Service":
			err = decodeInto(doc, &o.Services)
		case "v1 ConfigMap":
			err = decodeInto(doc, &o.ConfigMaps)
		case "v1 Secret":
			err = decodeInto(doc, &o.Secrets)
		case "policy/v1 PodDisruptionBudget":
			err = decodeInto(doc, &o.PDBs)
		case "networking.k8s.io/v1 Ingress":
			err = decodeInto(doc, &o.Ingresses)
		default:
			fields, ok := customKinds[gvk]
			if !ok {
				err = errors.New("a kind the check does not know")
				break
			}
			var u map[string]any
			if err = yaml.Unmarshal(doc, &u); err != nil {
				break
			}
			spec, _ := u["spec"].(map[string]any)
			for _, f := range fields {
				if spec[f] == nil {
					err = errors.Join(err, fmt.Errorf("spec.%s is missing", f))
				}
			}
			o.Custom[tm.Kind] = append(o.Custom[tm.Kind], u)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", gvk, tm.Metadata.Name, err))
		}
	}
	return o, errors.Join(errs...)
}

func decodeInto[T any](doc []byte, list *[]T) error {
	var v T
	if err := yaml.UnmarshalStrict(doc, &v); err != nil {
		return fmt.Errorf("strict decode: %w", err)
	}
	*list = append(*list, v)
	return nil
}

// Workload is one pod template of the base and what runs in it.
type Workload struct {
	Kind, Name string
	Replicas   int32
	Pod        corev1.PodTemplateSpec
}

// Workloads lists the pod templates of the Deployments, StatefulSets and Jobs.
func (o Objects) Workloads() []Workload {
	var out []Workload
	for _, d := range o.Deployments {
		out = append(out, Workload{"Deployment", d.Name, replicas(d.Spec.Replicas), d.Spec.Template})
	}
	for _, s := range o.StatefulSets {
		out = append(out, Workload{"StatefulSet", s.Name, replicas(s.Spec.Replicas), s.Spec.Template})
	}
	for _, j := range o.Jobs {
		out = append(out, Workload{"Job", j.Name, 1, j.Spec.Template})
	}
	return out
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1 // the API's default
	}
	return *r
}

// source is where one environment variable of a container comes from.
type source struct {
	Value  string // literal, or resolved from a ConfigMap, Secret or the pod
	Secret string // "secret/key" when from a secretKeyRef
	Field  string // fieldRef path
}

// container is one container of a workload, its variables resolved.
type container struct {
	w      Workload
	c      corev1.Container
	binary string
	cfg    any
	env    map[string]source
	port   int32 // its listener's port (0: no listener)
}

func (c container) String() string { return c.w.Kind + " " + c.w.Name + "/" + c.c.Name }

// Check returns every disagreement between the rendered base and the code;
// binaries are the ones the image's Dockerfile builds.
func Check(o Objects, binaries []string) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	var all []container
	for _, w := range o.Workloads() {
		if len(w.Pod.Spec.Containers) == 0 {
			bad("%s %s: no containers", w.Kind, w.Name)
		}
		for _, c := range w.Pod.Spec.Containers {
			ct, cerrs := resolve(o, w, c, binaries)
			errs = append(errs, cerrs...)
			if ct.cfg != nil {
				all = append(all, ct)
			}
		}
	}
	count := map[string]int32{}
	for _, c := range all {
		count[c.binary] += c.w.Replicas
		if c.binary == "waitroom-consumer" {
			if c.w.Kind != "StatefulSet" {
				bad("%s: the consumer runs in a %s; a StatefulSet's pod names are the stable static member ids", c, c.w.Kind)
			}
			if s := c.env["WR_CONSUMER_INSTANCE_ID"]; s.Field != "metadata.name" {
				bad("%s: WR_CONSUMER_INSTANCE_ID must come from the pod's name (fieldRef metadata.name), not %+v", c, s)
			}
		}
		if c.port != 0 {
			errs = append(errs, checkServer(o, c)...)
		}
	}
	for bin, min := range MinReplicas {
		if count[bin] < min {
			bad("%d pods run %s, want at least %d", count[bin], bin, min)
		}
	}
	errs = append(errs, checkShared(all)...)
	errs = append(errs, checkAgree(all)...)
	errs = append(errs, checkIngress(o, all)...)
	errs = append(errs, checkMonitor(o, all)...)
	return errs
}

// resolve checks one container's binary and environment and resolves its
// variables from literals, ConfigMaps, Secrets and the pod.
func resolve(o Objects, w Workload, c corev1.Container, binaries []string) (container, []error) {
	r := &resolver{o: o, ct: container{w: w, c: c, env: map[string]source{}}}
	if len(c.Command) == 0 {
		r.bad("no command: the image's default would run the api")
		return r.ct, r.errs
	}
	r.ct.binary = c.Command[0]
	r.ct.cfg = composecheck.Binaries[r.ct.binary]
	if r.ct.cfg == nil {
		r.bad("command %q runs no known binary", c.Command)
		return r.ct, r.errs
	}
	if !slices.Contains(binaries, r.ct.binary) {
		r.bad("the Dockerfile does not build %s", r.ct.binary)
	}
	if c.Image == "" {
		r.bad("no image")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		r.bad("no cpu or memory request")
	}
	if c.Resources.Limits.Memory().IsZero() {
		r.bad("no memory limit")
	}
	fields, err := composecheck.EnvFields(r.ct.cfg)
	if err != nil {
		r.bad("%v", err)
		return r.ct, r.errs
	}
	r.fields = fields
	for _, ef := range c.EnvFrom {
		r.envFrom(ef)
	}
	for _, e := range c.Env {
		r.set(e.Name, r.sourceOf(e))
	}
	r.checkKeys()
	if err := composecheck.LoadConfig(r.ct.cfg, values(r.ct.env)); err != nil {
		r.bad("%v", err)
	}
	r.listener()
	return r.ct, r.errs
}

// resolver gathers one container's variables, and what is wrong with them.
type resolver struct {
	o      Objects
	ct     container
	fields map[string]composecheck.EnvField // what the container's binary reads
	errs   []error
}

func (r *resolver) bad(format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf(r.ct.String()+": "+format, args...))
}

// set records variable name from s, checking that the binary reads it and
// that a secret comes from a Secret.
func (r *resolver) set(name string, s source) {
	if _, ok := r.fields[name]; !ok && !runtimeEnv[name] {
		r.bad("sets %s, which %s does not read (%T)", name, r.ct.binary, r.ct.cfg)
	}
	if r.fields[name].Secret && s.Secret == "" {
		r.bad("%s is a secret: take it from a Secret (secretKeyRef), not a literal or a ConfigMap", name)
	}
	r.ct.env[name] = s
}

// envFrom sets every variable of the ConfigMap or Secret ef names.
func (r *resolver) envFrom(ef corev1.EnvFromSource) {
	switch {
	case ef.ConfigMapRef != nil:
		cm, ok := find(r.o.ConfigMaps, ef.ConfigMapRef.Name)
		if !ok {
			r.bad("envFrom names ConfigMap %s, which the base does not hold", ef.ConfigMapRef.Name)
			return
		}
		for k, v := range cm.Data {
			r.set(ef.Prefix+k, source{Value: v})
		}
	case ef.SecretRef != nil:
		sec, ok := find(r.o.Secrets, ef.SecretRef.Name)
		if !ok {
			r.bad("envFrom names Secret %s, which the base does not hold", ef.SecretRef.Name)
			return
		}
		for k, v := range secretData(sec) {
			r.set(ef.Prefix+k, source{Value: v, Secret: sec.Name + "/" + k})
		}
	}
}

// sourceOf resolves variable e: a literal, a Secret's or ConfigMap's key, or
// a field of the pod.
func (r *resolver) sourceOf(e corev1.EnvVar) source {
	var s source
	switch vf := e.ValueFrom; {
	case vf == nil:
		s.Value = e.Value
	case vf.SecretKeyRef != nil:
		ref := vf.SecretKeyRef
		s.Secret = ref.Name + "/" + ref.Key
		sec, ok := find(r.o.Secrets, ref.Name)
		v, has := secretData(sec)[ref.Key]
		switch {
		case !ok:
			r.bad("%s names Secret %s, which the base does not hold", e.Name, ref.Name)
		case !has && (ref.Optional == nil || !*ref.Optional):
			r.bad("%s names key %s of Secret %s, which it does not have", e.Name, ref.Key, ref.Name)
		}
		s.Value = v
	case vf.ConfigMapKeyRef != nil:
		cm, ok := find(r.o.ConfigMaps, vf.ConfigMapKeyRef.Name)
		if !ok {
			r.bad("%s names ConfigMap %s, which the base does not hold", e.Name, vf.ConfigMapKeyRef.Name)
		}
		s.Value = cm.Data[vf.ConfigMapKeyRef.Key]
	case vf.FieldRef != nil:
		s.Field = vf.FieldRef.FieldPath
		if s.Field == "metadata.name" {
			s.Value = r.ct.w.Name + "-0" // what a pod of it is called
		}
	}
	return s
}

// checkKeys checks that a server reads each of its keys from a Secret.
func (r *resolver) checkKeys() {
	_, listens := reflect.TypeOf(r.ct.cfg).FieldByName("Addr")
	for _, k := range Keys {
		if _, reads := r.fields[k]; !reads || !listens {
			continue
		}
		if s := r.ct.env[k]; s.Secret == "" {
			r.bad("%s reads %s but takes it from no Secret (it would fall back to a derived or development key, or turn the feature off)", r.ct.binary, k)
		}
	}
}

// listener checks a server's listen address (reachable from other pods) and
// notes its port.
func (r *resolver) listener() {
	addrField, listens := reflect.TypeOf(r.ct.cfg).FieldByName("Addr")
	if !listens {
		return
	}
	lk := addrField.Tag.Get("env")
	addr, set := r.ct.env[lk]
	host, port, err := net.SplitHostPort(addr.Value)
	switch {
	case !set:
		r.bad("%s is not set: the default listens on loopback, unreachable from other pods", lk)
	case err != nil:
		r.bad("%s=%q: %v", lk, addr.Value, err)
	case host != "" && host != "0.0.0.0" && host != "::":
		r.bad("%s=%q listens on %s only; a pod is reached on its own address (0.0.0.0)", lk, addr.Value, host)
	default:
		p, _ := strconv.Atoi(port)
		r.ct.port = int32(p)
	}
}

// checkServer checks the probes, Service, budget and container port of a
// container with a listener.
func checkServer(o Objects, c container) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(c.String()+": "+format, args...)) }
	if !slices.ContainsFunc(c.c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == c.port }) {
		bad("listens on %d but declares no such container port", c.port)
	}
	probe := func(name string, p *corev1.Probe, path string) {
		switch {
		case p == nil || p.HTTPGet == nil:
			bad("no HTTP %s probe (want GET %s)", name, path)
		case p.HTTPGet.Path != path:
			bad("%s probe on %s, want %s", name, p.HTTPGet.Path, path)
		case portOf(c.c.Ports, p.HTTPGet.Port) != c.port:
			bad("%s probe on port %s, but the process listens on %d", name, p.HTTPGet.Port.String(), c.port)
		}
	}
	probe("readiness", c.c.ReadinessProbe, "/readyz")
	probe("liveness", c.c.LivenessProbe, "/healthz")
	if sp := c.c.StartupProbe; sp != nil && sp.HTTPGet != nil && portOf(c.c.Ports, sp.HTTPGet.Port) != c.port {
		bad("startup probe on port %s, but the process listens on %d", sp.HTTPGet.Port.String(), c.port)
	}
	podLabels := labels.Set(c.w.Pod.Labels)
	if svc, ok := serviceOf(o, c); !ok {
		bad("no Service selects its pods on port %d", c.port)
	} else if svc.Spec.ClusterIP != corev1.ClusterIPNone && c.w.Kind == "StatefulSet" {
		bad("Service %s governs a StatefulSet but is not headless", svc.Name)
	}
	if c.w.Kind == "StatefulSet" {
		for _, s := range o.StatefulSets {
			if s.Name == c.w.Name {
				if svc, ok := find(o.Services, s.Spec.ServiceName); !ok || !selects(svc.Spec.Selector, podLabels) {
					bad("serviceName %q is no Service selecting its pods", s.Spec.ServiceName)
				}
			}
		}
	}
	if c.w.Kind != "Job" && !slices.ContainsFunc(o.PDBs, func(p policyv1.PodDisruptionBudget) bool {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		return err == nil && !sel.Empty() && sel.Matches(podLabels)
	}) {
		bad("no PodDisruptionBudget covers its pods")
	}
	return errs
}

// serviceOf finds a Service that selects c's pods and sends a port to c's
// listener.
func serviceOf(o Objects, c container) (corev1.Service, bool) {
	for _, s := range o.Services {
		if !selects(s.Spec.Selector, labels.Set(c.w.Pod.Labels)) {
			continue
		}
		for _, p := range s.Spec.Ports {
			if portOf(c.c.Ports, targetPort(p)) == c.port {
				return s, true
			}
		}
	}
	return corev1.Service{}, false
}

func targetPort(p corev1.ServicePort) intstr.IntOrString {
	if p.TargetPort.IntVal == 0 && p.TargetPort.StrVal == "" {
		return intstr.FromInt32(p.Port)
	}
	return p.TargetPort
}

// selects tells whether a Service selector (non-empty) picks pods with l.
func selects(sel map[string]string, l labels.Set) bool {
	return len(sel) > 0 && labels.SelectorFromSet(sel).Matches(l)
}

// portOf resolves a probe's or Service's port (a number or a container port
// name) to a number.
func portOf(ports []corev1.ContainerPort, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

// checkShared checks what two binaries must agree on: the api and the
// notifier hold the same token settings and keys (the notifier verifies the
// api's queue tokens and signs the same admission tokens), and the api's
// bypass public key is the public half of the schedulers' bypass key.
func checkShared(all []container) []error {
	var errs []error
	tokenFields, err := composecheck.EnvFields(registration.TokenConfig{})
	if err != nil {
		return []error{err}
	}
	var first *container
	for i := range all {
		c := &all[i]
		if c.binary != "waitroom-api" && c.binary != "waitroom-notifier" {
			continue
		}
		if first == nil {
			first = c
			continue
		}
		for k := range tokenFields {
			a, b := first.env[k], c.env[k]
			if a.Secret != b.Secret || a.Value != b.Value {
				errs = append(errs, fmt.Errorf("%s and %s disagree on %s (%+v, %+v): the api and the notifier share the token settings and keys", first, c, k, a.Secret, b.Secret))
			}
		}
	}
	for _, api := range all {
		if api.binary != "waitroom-api" {
			continue
		}
		for _, sch := range all {
			if sch.binary != "waitroom-scheduler" {
				continue
			}
			priv, perr := bypass.ParsePrivate(sch.env["WR_BYPASS_KEY"].Value)
			pub, uerr := bypass.ParsePublic(api.env["WR_BYPASS_PUBLIC_KEY"].Value)
			if perr != nil || uerr != nil || !pub.Equal(priv.Public()) {
				errs = append(errs, fmt.Errorf("%s: WR_BYPASS_PUBLIC_KEY is not the public half of %s's WR_BYPASS_KEY: codes it issues would be refused", api, sch))
			}
		}
	}
	return errs
}

// Agree are the variables every binary that reads them must hold alike: the
// same Kafka and Redis, the consumer's groups (the console shows their lag),
// how late signs of life may reach Redis (the schedulers wait that long
// before releasing an idle place), and the schedulers' transactional ids
// (the consumer's rebuild fences them).
var Agree = []string{
	"WR_KAFKA_BROKERS", "WR_REDIS_MODE", "WR_REDIS_ADDR", "WR_REDIS_ADDRS", "WR_REDIS_DB", "WR_REDIS_SENTINEL_MASTER",
	"WR_CONSUMER_GROUP", "WR_CONSUMER_ITEMS_GROUP", "WR_SEEN_FLUSH", "WR_SCHEDULER_TRANSACTIONAL_ID",
}

// checkAgree checks the Agree variables have one value (set, or the
// default) in every container that reads them.
func checkAgree(all []container) []error {
	var errs []error
	for _, k := range Agree {
		seen := map[string][]string{} // value -> containers
		for _, c := range all {
			v, reads, err := effective(c, k)
			if err != nil {
				errs = append(errs, err)
			}
			if reads {
				seen[v] = append(seen[v], c.String())
			}
		}
		if len(seen) > 1 {
			errs = append(errs, fmt.Errorf("%s differs between containers (%v): every binary must read the same value", k, seen))
		}
	}
	return errs
}

// effective is the value of k in c: what it sets, or the default of the
// field its binary reads k into.
func effective(c container, k string) (v string, reads bool, err error) {
	params, err := env.GetFieldParams(reflect.New(reflect.TypeOf(c.cfg)).Interface())
	if err != nil {
		return "", false, fmt.Errorf("%s: env fields of %T: %w", c, c.cfg, err)
	}
	for _, p := range params {
		if p.Key != k {
			continue
		}
		if s, ok := c.env[k]; ok {
			return s.Value, true, nil
		}
		return p.DefaultValue, true, nil
	}
	return "", false, nil
}

// Sample paths of each route, the events stream's built from the notifier's
// own route.
var (
	eventsSample = strings.NewReplacer(":itemId", "concert-2026", ":token", "eyJhbGciOi.x.y").Replace(sse.EventsPath)
	apiSamples   = []string{"/api/v1/items/concert-2026/registrations", "/api/v1/items/concert-2026/registrations/eyJhbGciOi.x.y", "/items/concert-2026/wait", "/.well-known/jwks.json"}
)

// checkIngress checks the ingress sends the event streams to the notifiers
// unbuffered with a read timeout above the heartbeat, everything else to the
// api, and that the api trusts the ingress's forwarded addresses.
func checkIngress(o Objects, all []container) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("ingress: "+format, args...)) }
	if len(o.Ingresses) == 0 {
		return []error{errors.New("no Ingress")}
	}
	byBinary := map[string]container{}
	for _, c := range all {
		byBinary[c.binary] = c
	}
	for _, path := range append([]string{eventsSample}, apiSamples...) {
		want := "waitroom-api"
		if path == eventsSample {
			want = "waitroom-notifier"
		}
		ing, be, ok := route(o.Ingresses, path)
		if !ok {
			bad("no path takes %s", path)
			continue
		}
		svc, found := find(o.Services, be.Service.Name)
		c := byBinary[want]
		if !found || !selects(svc.Spec.Selector, labels.Set(c.w.Pod.Labels)) {
			bad("%s goes to Service %s, which does not select the %s pods", path, be.Service.Name, want)
			continue
		}
		if p := servicePort(svc, be.Service.Port); p == nil || portOf(c.c.Ports, targetPort(*p)) != c.port {
			bad("%s goes to port %+v of %s, which is not %s's listener (%d)", path, be.Service.Port, svc.Name, want, c.port)
		}
		if want != "waitroom-notifier" {
			continue
		}
		a := ing.Annotations
		if a["nginx.ingress.kubernetes.io/proxy-buffering"] != "off" {
			bad("%s buffers the event stream: set nginx.ingress.kubernetes.io/proxy-buffering: \"off\"", ing.Name)
		}
		var cfg sse.Config
		if err := env.ParseWithOptions(&cfg, env.Options{Environment: values(c.env)}); err != nil {
			bad("load the notifier's config: %v", err)
		}
		for _, k := range []string{"proxy-read-timeout", "proxy-send-timeout"} {
			v := a["nginx.ingress.kubernetes.io/"+k]
			secs, err := strconv.Atoi(v)
			if err != nil || time.Duration(secs)*time.Second < 2*cfg.Heartbeat {
				bad("%s: %s=%q; an event stream is quiet up to the heartbeat (%s): give at least twice that (ingress-nginx cuts at 60 s by default)", ing.Name, k, v, cfg.Heartbeat)
			}
		}
	}
	api, ok := byBinary["waitroom-api"]
	if !ok {
		return errs
	}
	tp, set := api.env["WR_TRUSTED_PROXIES"]
	if !set || strings.TrimSpace(tp.Value) == "" {
		bad("%s: WR_TRUSTED_PROXIES is not set: behind the ingress every client would share the controller's address", api)
	}
	for _, p := range strings.Split(tp.Value, ",") {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(p))
		if err != nil {
			if _, err = netip.ParseAddr(strings.TrimSpace(p)); err != nil {
				bad("%s: WR_TRUSTED_PROXIES entry %q is no address or CIDR", api, p)
			}
			continue
		}
		if pfx.Bits() == 0 {
			bad("%s: WR_TRUSTED_PROXIES trusts %s, every address: a client could choose its own", api, pfx)
		}
	}
	return errs
}

// route finds the ingress path that takes a request path the way
// ingress-nginx does: with use-regex, paths are case-insensitive regular
// expressions anchored at the start, and the longest matching one wins;
// Prefix paths match whole segments.
func route(ings []networkingv1.Ingress, path string) (networkingv1.Ingress, networkingv1.IngressBackend, bool) {
	var (
		best    networkingv1.Ingress
		backend networkingv1.IngressBackend
		bestLen = -1
	)
	for _, ing := range ings {
		regex := ing.Annotations["nginx.ingress.kubernetes.io/use-regex"] == "true"
		for _, r := range ing.Spec.Rules {
			if r.HTTP == nil {
				continue
			}
			for _, p := range r.HTTP.Paths {
				var match bool
				switch {
				case p.PathType != nil && *p.PathType == networkingv1.PathTypeImplementationSpecific && regex:
					re, err := regexp.Compile("(?i)^" + p.Path)
					match = err == nil && re.MatchString(path)
				case p.PathType != nil && *p.PathType == networkingv1.PathTypePrefix:
					pre := strings.TrimSuffix(p.Path, "/")
					match = pre == "" || path == pre || strings.HasPrefix(path, pre+"/")
				case p.PathType != nil && *p.PathType == networkingv1.PathTypeExact:
					match = path == p.Path
				}
				if match && len(p.Path) > bestLen && p.Backend.Service != nil {
					best, backend, bestLen = ing, p.Backend, len(p.Path)
				}
			}
		}
	}
	return best, backend, bestLen >= 0
}

func servicePort(s corev1.Service, p networkingv1.ServiceBackendPort) *corev1.ServicePort {
	for i, sp := range s.Spec.Ports {
		if (p.Name != "" && sp.Name == p.Name) || (p.Name == "" && sp.Port == p.Number) {
			return &s.Spec.Ports[i]
		}
	}
	return nil
}

// checkMonitor checks the ServiceMonitor scrapes /metrics of every server
// through its Service, and that the alert rules are there.
func checkMonitor(o Objects, all []container) []error {
	var errs []error
	mons := o.Custom["ServiceMonitor"]
	if len(mons) == 0 {
		errs = append(errs, errors.New("no ServiceMonitor"))
	}
	if len(o.Custom["PrometheusRule"]) == 0 {
		errs = append(errs, errors.New("no PrometheusRule"))
	}
	for _, c := range all {
		if c.port == 0 {
			continue
		}
		svc, ok := serviceOf(o, c)
		if !ok {
			continue // checkServer says so
		}
		scraped := false
		for _, m := range mons {
			spec, _ := m["spec"].(map[string]any)
			sel, _ := spec["selector"].(map[string]any)
			ml, _ := sel["matchLabels"].(map[string]any)
			want := map[string]string{}
			for k, v := range ml {
				want[k] = fmt.Sprint(v)
			}
			if !selects(want, labels.Set(svc.Labels)) {
				continue
			}
			eps, _ := spec["endpoints"].([]any)
			for _, e := range eps {
				ep, _ := e.(map[string]any)
				path, _ := ep["path"].(string)
				name, _ := ep["port"].(string)
				p := servicePort(svc, networkingv1.ServiceBackendPort{Name: name})
				if (path == "" || path == "/metrics") && p != nil && portOf(c.c.Ports, targetPort(*p)) == c.port {
					scraped = true
				}
			}
		}
		if !scraped {
			errs = append(errs, fmt.Errorf("%s: no ServiceMonitor scrapes /metrics through Service %s on its listener", c, svc.Name))
		}
	}
	return errs
}

func values(env map[string]source) map[string]string {
	out := make(map[string]string, len(env))
	for k, s := range env {
		out[k] = s.Value
	}
	return out
}

type named interface {
	GetName() string
}

// find returns the object of list called name.
func find[T any, PT interface {
	*T
	named
}](list []T, name string) (T, bool) {
	for i := range list {
		if PT(&list[i]).GetName() == name {
			return list[i], true
		}
	}
	var zero T
	return zero, false
}

func secretData(s corev1.Secret) map[string]string {
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

// PrometheusRule wraps Prometheus rule files' groups (deploy/prometheus's
// alerts.yml) in a Prometheus Operator PrometheusRule, comments and all: the
// rules are written once, and TestPrometheusRuleIsAlerts keeps the copy in
// deploy/kubernetes/base the same (go test -run PrometheusRule -update rewrites it).
func PrometheusRule(alerts []byte) []byte {
	var b bytes.Buffer
	b.WriteString("# Generated from deploy/prometheus/alerts.yml by\n" +
		"#   go test ./deploy/composecheck/kubecheck -run PrometheusRule -update\n" +
		"# Edit the alerts there, never here.\n" +
		"apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: waitroom\nspec:\n")
	for _, line := range strings.SplitAfter(string(alerts), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes()
}

// Package config loads a service's configuration from environment variables
// into a struct with defaults in its tags, and renders it for the start-up log
// with secrets masked.
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"go.uber.org/zap"
)

// Kafka is how a service reaches Kafka.
type Kafka struct {
	Brokers  []string `env:"WR_KAFKA_BROKERS" envDefault:"127.0.0.1:9092" envSeparator:","`
	ClientID string   `env:"WR_KAFKA_CLIENT_ID" envDefault:"waitroom"`
	Security KafkaSecurity
}

// Validate checks the brokers and the security settings.
func (k Kafka) Validate() error {
	if len(k.Brokers) == 0 {
		return errors.New("WR_KAFKA_BROKERS: at least one broker is needed")
	}
	for _, b := range k.Brokers {
		if strings.TrimSpace(b) == "" {
			return fmt.Errorf("WR_KAFKA_BROKERS: empty broker address in %q", strings.Join(k.Brokers, ","))
		}
	}
	return k.Security.Validate()
}

// Log is how a service logs.
type Log struct {
	Level  string `env:"WR_LOG_LEVEL" envDefault:"info"`
	Format string `env:"WR_LOG_FORMAT" envDefault:"json"` // json or console
}

// HTTP is a service's listener (httpserver.Serve).
type HTTP struct {
	ShutdownTimeout time.Duration `env:"WR_SHUTDOWN_TIMEOUT" envDefault:"10s"`
	// ReadHeaderTimeout bounds reading a request's headers: a client that
	// trickles them (slowloris) is dropped.
	ReadHeaderTimeout time.Duration `env:"WR_HTTP_READ_HEADER_TIMEOUT" envDefault:"5s"`
	// ReadTimeout bounds reading a whole request, headers and body. It ends
	// once the body is read, so it never cuts an answer or an event stream.
	ReadTimeout time.Duration `env:"WR_HTTP_READ_TIMEOUT" envDefault:"10s"`
	// H2CMaxStreams is how many requests one cleartext HTTP/2 connection
	// (h2c with prior knowledge: a front door multiplexing its clients'
	// event streams to this service) may carry at once; 0 serves HTTP/1.1
	// alone. Each open event stream on it holds its handler's goroutine.
	H2CMaxStreams int `env:"WR_HTTP_H2C_MAX_STREAMS" envDefault:"250"`
	// H2CServer is what serves h2c: H2CNet (net/http's HTTP/2, "" too) or
	// H2COwn (pkg/web/h2c: a stream costs less, request bodies are
	// refused). Not read from the environment here: the notifier sets it
	// from WR_SSE_H2C_SERVER, as only its routes are all GETs.
	H2CServer string `env:"-"`
	// PprofAddr serves net/http/pprof of the process on a port of its own
	// (empty: off): for profiling a service under load or in a long run,
	// never public.
	PprofAddr string `env:"WR_PPROF_ADDR"`
}

// The servers of cleartext HTTP/2 (HTTP.H2CServer).
const (
	H2CNet = "net" // net/http's
	H2COwn = "own" // pkg/web/h2c
)

// Validate checks the timeouts are positive and the stream bound is not negative.
func (h HTTP) Validate() error {
	switch {
	case h.ShutdownTimeout <= 0:
		return fmt.Errorf("WR_SHUTDOWN_TIMEOUT must be positive, not %s", h.ShutdownTimeout)
	case h.ReadHeaderTimeout <= 0:
		return fmt.Errorf("WR_HTTP_READ_HEADER_TIMEOUT must be positive, not %s", h.ReadHeaderTimeout)
	case h.ReadTimeout < h.ReadHeaderTimeout:
		return fmt.Errorf("WR_HTTP_READ_TIMEOUT (%s) must be at least WR_HTTP_READ_HEADER_TIMEOUT (%s): it bounds the headers too", h.ReadTimeout, h.ReadHeaderTimeout)
	case h.H2CMaxStreams < 0:
		return fmt.Errorf("WR_HTTP_H2C_MAX_STREAMS must not be negative (0: HTTP/1.1 alone), not %d", h.H2CMaxStreams)
	}
	return CheckH2CServer("the h2c server", h.H2CServer)
}

// CheckH2CServer is nil when v names a server of h2c (H2CNet, H2COwn; ""
// is H2CNet), else an error that calls it what (the setting it came from).
func CheckH2CServer(what, v string) error {
	if v != "" && v != H2CNet && v != H2COwn {
		return fmt.Errorf("%s must be %q or %q, not %q", what, H2CNet, H2COwn, v)
	}
	return nil
}

// ErrPublishedKey says a secret is one of the development keys published in
// waitroom's source.
var ErrPublishedKey = errors.New("published development key")

// RefusePublished refuses value, the secret of variable name, when it is one
// of published: development keys in the source, with which anyone can sign.
// The dev stack, which may use them, does not call it.
func RefusePublished(name, value string, published ...string) error {
	v := strings.TrimSpace(value)
	for _, p := range published {
		if v != "" && v == p {
			return fmt.Errorf("%s is a development key published in waitroom's source, with which anyone can sign: set a secret of your own: %w", name, ErrPublishedKey)
		}
	}
	return nil
}

// Load fills a T from the environment, defaults from its tags, and validates
// the parts of it this package defines (Kafka and its security settings), so a
// bad setting stops the process at start with the variable's name. A
// service's own Validate stays its business (it may change the config first).
func Load[T any]() (T, error) {
	var c T
	if err := env.Parse(&c); err != nil {
		return c, fmt.Errorf("load config: %w", err)
	}
	if err := validate(reflect.ValueOf(&c).Elem()); err != nil {
		return c, fmt.Errorf("load config: %w", err)
	}
	return c, nil
}

// Defaults returns a T holding the defaults of its tags alone, whatever the
// environment says: what a service runs with when nothing is set. The dev
// stack starts every service from its own Defaults instead of restating them.
func Defaults[T any]() (T, error) {
	var c T
	if err := env.ParseWithOptions(&c, env.Options{Environment: map[string]string{}}); err != nil {
		return c, fmt.Errorf("config defaults: %w", err)
	}
	return c, nil
}

// Validator is a config that checks what the environment cannot.
type Validator interface {
	Validate() error
}

// Validate calls cfg's Validate when it has one.
func Validate(cfg any) error {
	if v, ok := cfg.(Validator); ok {
		return v.Validate()
	}
	return nil
}

var pkgPath = reflect.TypeOf(Kafka{}).PkgPath()

// validate calls Validate on v when it is one of this package's types and has
// one, then on each struct field, depth first.
func validate(v reflect.Value) error {
	if v.Type().PkgPath() == pkgPath && v.CanAddr() && v.Addr().CanInterface() {
		if val, ok := v.Addr().Interface().(Validator); ok {
			if err := val.Validate(); err != nil {
				return err
			}
		}
	}
	if v.Kind() != reflect.Struct || v.Type() == reflect.TypeOf(time.Time{}) {
		return nil
	}
	for i := 0; i < v.NumField(); i++ {
		if !v.Type().Field(i).IsExported() {
			continue
		}
		if err := validate(v.Field(i)); err != nil {
			return err
		}
	}
	return nil
}

// Field renders cfg for the start-up log, env names as keys, secrets masked.
func Field(cfg any) zap.Field { return zap.Any("config", Values(cfg)) }

// Values returns cfg's values by env name, secrets masked.
func Values(cfg any) map[string]any {
	out := map[string]any{}
	walk(reflect.ValueOf(cfg), out)
	return out
}

func walk(v reflect.Value, out map[string]any) {
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f, fv := t.Field(i), v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Time{}) {
			walk(fv, out)
			continue
		}
		name := f.Tag.Get("env")
		if name == "" {
			continue
		}
		switch {
		case f.Tag.Get("secret") == "true" && !fv.IsZero():
			out[name] = "***"
		case f.Type == reflect.TypeOf(time.Duration(0)):
			out[name] = fv.Interface().(time.Duration).String()
		default:
			out[name] = fv.Interface()
		}
	}
}

// TuneGC sets the garbage collector's target to 400% when GOGC is not set:
// the services allocate many short-lived objects per request and keep little,
// so trading memory for CPU pays on small machines. GOGC and GOMEMLIMIT, when
// set, still decide.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

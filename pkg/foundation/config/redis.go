package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Redis modes WR_REDIS_MODE accepts.
const (
	RedisSingle   = "single"
	RedisSentinel = "sentinel"
	RedisCluster  = "cluster"
)

// Redis is how a service reaches Redis: one server, a primary behind
// Sentinel (failover), or a Redis Cluster; TLS and an ACL user for managed
// Redis (ElastiCache, Memorystore...).
type Redis struct {
	Mode string `env:"WR_REDIS_MODE" envDefault:"single"` // single, sentinel or cluster
	// Addr is the server of single mode; WR_REDIS_ADDRS, when set, wins.
	Addr string `env:"WR_REDIS_ADDR" envDefault:"127.0.0.1:6379"`
	// Addrs: sentinel mode, the Sentinels; cluster mode, seed nodes (any
	// of them; the client learns the rest); single mode, the one server.
	Addrs          []string `env:"WR_REDIS_ADDRS" envSeparator:","`
	SentinelMaster string   `env:"WR_REDIS_SENTINEL_MASTER"` // the master name the Sentinels watch
	// SentinelPassword is the Sentinels' own password (requirepass of sentinel.conf), when they have one.
	SentinelPassword string `env:"WR_REDIS_SENTINEL_PASSWORD" secret:"true"`
	Username         string `env:"WR_REDIS_USERNAME"` // ACL user; empty: the default user
	Password         string `env:"WR_REDIS_PASSWORD" secret:"true"`
	DB               int    `env:"WR_REDIS_DB" envDefault:"0"`         // single and sentinel only: a cluster has db 0 alone
	PoolSize         int    `env:"WR_REDIS_POOL_SIZE" envDefault:"64"` // per node

	TLS           bool   `env:"WR_REDIS_TLS" envDefault:"false"`
	TLSCAFile     string `env:"WR_REDIS_TLS_CA_FILE"`     // PEM; empty: the system's roots
	TLSCertFile   string `env:"WR_REDIS_TLS_CERT_FILE"`   // PEM client certificate (mutual TLS), with the key
	TLSKeyFile    string `env:"WR_REDIS_TLS_KEY_FILE"`    // PEM key of the client certificate
	TLSServerName string `env:"WR_REDIS_TLS_SERVER_NAME"` // empty: each node's host name
	// TLSInsecureSkipVerify accepts any server certificate: for a test
	// against a self-signed server only, never in production.
	TLSInsecureSkipVerify bool `env:"WR_REDIS_TLS_INSECURE_SKIP_VERIFY" envDefault:"false"`
}

// Endpoints returns the addresses the mode connects to: WR_REDIS_ADDRS, or
// WR_REDIS_ADDR in single mode when WR_REDIS_ADDRS is empty.
func (r Redis) Endpoints() []string {
	var out []string
	for _, a := range r.Addrs {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	if len(out) == 0 && r.Topology() == RedisSingle && r.Addr != "" {
		out = []string{r.Addr}
	}
	return out
}

// Topology is the mode in effect: Mode lowercased, single when empty.
func (r Redis) Topology() string {
	if r.Mode == "" {
		return RedisSingle
	}
	return strings.ToLower(r.Mode)
}

// Validate checks that the settings name one complete way to connect, and
// that the files they name can be read.
func (r Redis) Validate() error {
	eps := r.Endpoints()
	switch m := r.Topology(); m {
	case RedisSingle:
		if len(eps) != 1 {
			return fmt.Errorf("WR_REDIS_MODE=single takes one address (WR_REDIS_ADDR or WR_REDIS_ADDRS), got %d", len(eps))
		}
		if r.SentinelMaster != "" {
			return errors.New("WR_REDIS_SENTINEL_MASTER set while WR_REDIS_MODE is single: set WR_REDIS_MODE=sentinel")
		}
	case RedisSentinel:
		if len(eps) == 0 {
			return errors.New("WR_REDIS_MODE=sentinel needs the Sentinels' addresses in WR_REDIS_ADDRS")
		}
		if r.SentinelMaster == "" {
			return errors.New("WR_REDIS_MODE=sentinel needs WR_REDIS_SENTINEL_MASTER (the master name the Sentinels watch)")
		}
	case RedisCluster:
		if len(eps) == 0 {
			return errors.New("WR_REDIS_MODE=cluster needs seed nodes in WR_REDIS_ADDRS")
		}
		if r.DB != 0 {
			return fmt.Errorf("WR_REDIS_DB=%d: a Redis Cluster has database 0 alone", r.DB)
		}
		if r.SentinelMaster != "" {
			return errors.New("WR_REDIS_SENTINEL_MASTER set while WR_REDIS_MODE is cluster")
		}
	default:
		return fmt.Errorf("WR_REDIS_MODE %q: want single, sentinel or cluster", r.Mode)
	}
	if r.PoolSize < 0 {
		return fmt.Errorf("WR_REDIS_POOL_SIZE %d: must not be negative", r.PoolSize)
	}
	if !r.TLS && (r.TLSCAFile != "" || r.TLSCertFile != "" || r.TLSKeyFile != "" || r.TLSServerName != "" || r.TLSInsecureSkipVerify) {
		return errors.New("WR_REDIS_TLS_* set while WR_REDIS_TLS is false: set WR_REDIS_TLS=true")
	}
	if (r.TLSCertFile == "") != (r.TLSKeyFile == "") {
		return errors.New("WR_REDIS_TLS_CERT_FILE and WR_REDIS_TLS_KEY_FILE go together: set both or neither")
	}
	for _, f := range []struct{ name, path string }{{"WR_REDIS_TLS_CA_FILE", r.TLSCAFile},
		{"WR_REDIS_TLS_CERT_FILE", r.TLSCertFile}, {"WR_REDIS_TLS_KEY_FILE", r.TLSKeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if r.Username != "" && r.Password == "" {
		return errors.New("WR_REDIS_USERNAME needs WR_REDIS_PASSWORD (an ACL user authenticates with both)")
	}
	return nil
}

// TLSConfig builds the client TLS config: nil without WR_REDIS_TLS; else
// the CA file's roots (or the system's), the client certificate when set,
// the server name override.
func (r Redis) TLSConfig() (*tls.Config, error) {
	if !r.TLS {
		return nil, nil
	}
	tc, err := ClientTLS("WR_REDIS", r.TLSCAFile, r.TLSCertFile, r.TLSKeyFile, r.TLSServerName)
	if err != nil {
		return nil, err
	}
	tc.InsecureSkipVerify = r.TLSInsecureSkipVerify //nolint:gosec // off by default, documented as test-only
	return tc, nil
}

// ClientTLS builds a client TLS config (TLS 1.2 at least): the roots of
// caFile (else the system's), the client certificate of certFile and keyFile
// when set, the server name override. prefix names the variables in errors
// (WR_KAFKA, WR_REDIS).
func ClientTLS(prefix, caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read %s_TLS_CA_FILE: %w", prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s_TLS_CA_FILE %s: no PEM certificate in it", prefix, caFile)
		}
		tc.RootCAs = pool
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load %[1]s_TLS_CERT_FILE/%[1]s_TLS_KEY_FILE: %w", prefix, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Describe names where the config points, for errors and logs: "cluster
// a,b,c", "sentinel mymaster@a,b" or the single address.
func (r Redis) Describe() string {
	eps := strings.Join(r.Endpoints(), ",")
	switch r.Topology() {
	case RedisSentinel:
		return "sentinel " + r.SentinelMaster + "@" + eps
	case RedisCluster:
		return "cluster " + eps
	}
	return eps
}

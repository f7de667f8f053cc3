package testenv

import (
	"crypto/ecdsa"
	"crypto/x509"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/config"
)

// Credentials of SecureRedis's ACL user.
const (
	RedisUser     = "waitroom"
	RedisPassword = "redis-s3cret-pw"
)

// SecureRedis starts a redis-server that speaks TLS only (a fresh CA, a
// server certificate for 127.0.0.1 and "localhost") and serves one ACL
// user, RedisUser/RedisPassword (the default user is off). It returns the
// config of a client that trusts the CA and logs in as that user.
func SecureRedis(t testing.TB) (config.Redis, *RedisServer) {
	t.Helper()
	dir := t.TempDir()
	caFile, srv := serverCert(t, dir)
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	writePEM(t, certFile, "CERTIFICATE", srv.Certificate[0])
	der, err := x509.MarshalECPrivateKey(srv.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "EC PRIVATE KEY", der)
	cfg := config.Redis{Mode: config.RedisSingle, TLS: true, TLSCAFile: caFile, Username: RedisUser, Password: RedisPassword, PoolSize: 8}
	tc, err := cfg.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	s := startWith(t, func(r *RedisServer) {
		r.probe = &redis.Options{TLSConfig: tc, Username: RedisUser, Password: RedisPassword}
		r.Args = []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile,
			"--tls-auth-clients", "no", "--user", "default", "off", "--user", RedisUser, "on", ">" + RedisPassword, "~*", "&*", "+@all"}
	})
	cfg.Addr = s.Addr
	return cfg, s
}

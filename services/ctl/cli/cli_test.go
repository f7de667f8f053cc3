package cli

import (
	"bytes"
	"context"
	"testing"
)

// run runs waitroomctl in-process and returns its exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), DefaultEnv(), nil, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"unknown command", []string{"bogus"}, `unknown command "bogus"`},
		{"unknown subcommand", []string{"topics", "bogus"}, `unknown command "bogus" for "waitroomctl topics"`},
		{"unknown flag", []string{"bench", "register", "--nope"}, "unknown flag: --nope"},
		{"bad flag value", []string{"bench", "register", "--n", "many"}, `invalid argument "many"`},
		{"stray argument", []string{"topics", "check", "extra"}, `unknown command "extra"`},
		{"bad output", []string{"-o", "yaml", "topics", "check"}, `--output "yaml"`},
		{"no brokers", []string{"topics", "check", "--brokers", ""}, "--brokers"},
		{"zero partitions", []string{"topics", "ensure", "--partitions", "0"}, "--partitions 0"},
		{"bad replication", []string{"topics", "ensure", "--replication-factor", "-2"}, "--replication-factor -2"},
		{"zero n", []string{"bench", "register", "--n", "0"}, "--n 0"},
		{"zero concurrency", []string{"bench", "register", "--concurrency", "0"}, "--concurrency 0"},
		{"huge concurrency", []string{"bench", "status", "--concurrency", "1000000"}, "--concurrency 1000000"},
		{"zero duration", []string{"bench", "register", "--duration", "0s"}, "--duration 0s"},
		{"bad url", []string{"bench", "register", "--url", "ftp://x"}, `--url "ftp://x"`},
		{"url without host", []string{"bench", "register", "--url", "http://"}, `--url "http://"`},
		{"bad item", []string{"bench", "register", "--items", "a/b"}, `--items: "a/b"`},
		{"no items", []string{"bench", "register", "--items", ""}, "--items"},
		{"negative sample", []string{"bench", "register", "--visible-sample", "-1"}, "--visible-sample -1"},
		{"error rate above 1", []string{"bench", "register", "--max-error-rate", "2"}, "--max-error-rate 2"},
		{"zero tokens", []string{"bench", "status", "--tokens", "0"}, "--tokens 0"},
		{"zero poll interval", []string{"bench", "status", "--poll-interval", "0s"}, "--poll-interval 0s"},
		{"unknown dlq subcommand", []string{"dlq", "purge"}, `unknown command "purge" for "waitroomctl dlq"`},
		{"bad error type", []string{"dlq", "ls", "--error-type", "OOPS"}, `--error-type "OOPS"`},
		{"bad dlq topic", []string{"dlq", "ls", "--topic", "orders"}, `--topic: "orders" is not a DLQ`},
		{"bad since", []string{"dlq", "ls", "--since", "yesterday"}, `--since "yesterday"`},
		{"negative limit", []string{"dlq", "replay", "--limit", "-1"}, "--limit -1"},
		{"negative rate", []string{"dlq", "replay", "--rate", "-1"}, "--rate -1"},
		{"show without entry", []string{"dlq", "show"}, "wants one <partition>/<offset>"},
		{"show bad entry", []string{"dlq", "show", "abc"}, `"abc" is not <partition>/<offset>`},
		{"dlq zero timeout", []string{"dlq", "ls", "--timeout", "0s"}, "--timeout 0s"},
		{"items set nothing", []string{"items", "set", "x"}, "nothing to change"},
		{"items set bad id", []string{"items", "set", "a b", "--rate", "1"}, `itemId "a b"`},
		{"items set two ids", []string{"items", "set", "a", "b", "--rate", "1"}, "wants one <itemId>"},
		{"items negative rate", []string{"items", "set", "x", "--rate", "-1"}, "--rate -1"},
		{"items huge rate", []string{"items", "set", "x", "--rate", "1e9"}, "--rate 1e+09"},
		{"items stock below -1", []string{"items", "set", "x", "--stock", "-2"}, "--stock -2"},
		{"items ttl fraction", []string{"items", "set", "x", "--session-ttl", "1500ms"}, "--session-ttl 1.5s"},
		{"items idle fraction", []string{"items", "set", "x", "--idle-timeout", "1500ms"}, "--idle-timeout 1.5s"},
		{"items idle too long", []string{"items", "set", "x", "--idle-timeout", "48h"}, "--idle-timeout 172800 is not in 0..86400"},
		{"items bad admin url", []string{"items", "set", "x", "--rate", "1", "--admin-token", "t", "--admin-url", "x"}, `--admin-url "x"`},
		{"stats without token", []string{"stats"}, "needs the admin token"},
		{"stats short interval", []string{"stats", "--admin-token", "t", "--interval", "1ms"}, "--interval 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, tc.args...)
			if code != ExitUsage {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
			}
			if !bytes.Contains([]byte(stderr), []byte(tc.want)) {
				t.Fatalf("stderr does not mention %q:\n%s", tc.want, stderr)
			}
		})
	}
}

func TestHelpExits0(t *testing.T) {
	for _, args := range [][]string{nil, {"--help"}, {"topics"}, {"bench", "register", "--help"}, {"dlq"}, {"dlq", "replay", "--help"},
		{"dlq", "show", "--help"}, {"items", "set", "--help"}, {"stats", "--help"}} {
		if code, _, stderr := run(t, args...); code != ExitOK {
			t.Errorf("%v: exit code %d, stderr:\n%s", args, code, stderr)
		}
	}
}

func TestDefaultEnv(t *testing.T) {
	e := DefaultEnv()
	if e.APIURL != "http://127.0.0.1:8080" || e.Partitions != 12 || e.LogFormat != "console" || len(e.Kafka.Brokers) != 1 {
		t.Fatalf("defaults: %+v", e)
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	e.AdminURL = "127.0.0.1:8082"
	if err := e.Validate(); err == nil {
		t.Fatal("a URL without a scheme passed")
	}
}

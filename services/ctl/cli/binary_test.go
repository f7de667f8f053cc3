package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// The tests below run waitroomctl as a user does: a built binary, flags and
// environment in, output and exit code out.

var bin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bin.dir != "" {
		_ = os.RemoveAll(bin.dir)
	}
	os.Exit(code)
}

// binary builds waitroomctl once per test run.
func binary(t *testing.T) string {
	t.Helper()
	bin.once.Do(func() {
		if bin.dir, bin.err = os.MkdirTemp("", "waitroomctl-test"); bin.err != nil {
			return
		}
		bin.path = filepath.Join(bin.dir, "waitroomctl")
		out, err := exec.Command("go", "build", "-o", bin.path, "..").CombinedOutput()
		if err != nil {
			bin.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, bin.err)
	return bin.path
}

// result is one run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

// runBin runs waitroomctl with args and only env (plus PATH and HOME) set.
func runBin(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := command(t, env, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run waitroomctl %v: %v", args, err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errOut.String()}
}

func command(t *testing.T, env []string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	return cmd
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// seedDLQ puts, on the registrations DLQ, 3 malformed records, 4 registrations
// for an unknown item and 1 that Redis refused, and returns the brokers.
func seedDLQ(t *testing.T) string {
	brokers := testenv.Kafka(t, 3)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var recs []*kgo.Record
	var letters []dlq.Letter
	add := func(key string, value []byte, err error) {
		r := &kgo.Record{Topic: topics.Registrations, Key: []byte(key), Value: value, Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}}}
		recs = append(recs, r)
		letters = append(letters, dlq.Letter{Record: r, Err: err, Attempts: 1})
	}
	for range 3 {
		add("tix", []byte("\x00garbage{"), fmt.Errorf("%w: invalid character", topics.ErrMalformed))
	}
	for i := range 4 {
		ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: fmt.Sprint("t", i), ItemID: "ghost", UserID: fmt.Sprint("u", i), RequestedAt: 1}
		add("ghost", topics.Encode(&ev), fmt.Errorf("%w: unknown item %q", topics.ErrInvalid, "ghost"))
	}
	ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "tp", ItemID: "poison", UserID: "p", RequestedAt: 1}
	add("poison", topics.Encode(&ev), errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"))
	letters[len(letters)-1].Attempts = 3
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	require.NoError(t, dlq.NewWriter(cl).Send(ctx, letters...))
	return strings.Join(brokers, ",")
}

func TestDLQCommandsAsAUser(t *testing.T) {
	brokers := seedDLQ(t)
	env := []string{"WR_KAFKA_BROKERS=" + brokers}

	r := runBin(t, env, "dlq", "ls")
	require.Equal(t, ExitOK, r.code, r)
	assert.Regexp(t, `(?m)^ENTRY\s+FAILED-AT\s+ERROR-TYPE\s+SOURCE\s+KEY\s+ATTEMPTS\s+ERROR$`, r.stdout)
	assert.Regexp(t, `(?m)^\d+/\d+\s+\S+Z\s+PROCESSING_ERROR\s+waitroom\.registrations/\d+/\d+\s+poison\s+3\s+WRONGTYPE`, r.stdout)
	assert.Contains(t, r.stdout, "8 dead letters in waitroom.registrations.dlq\n")

	r = runBin(t, env, "-o", "json", "dlq", "ls", "--error-type", "parsing")
	require.Equal(t, ExitOK, r.code, r)
	var l dlq.List
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), r.stdout)
	require.Len(t, l.Entries, 3)
	for _, e := range l.Entries {
		assert.Equal(t, topics.ErrorTypeParsing, e.Verdict.ErrorType)
		assert.Equal(t, "\x00garbage{", string(e.Value))
	}

	r = runBin(t, env, "dlq", "ls", "--limit", "2", "--brokers", brokers)
	require.Equal(t, ExitOK, r.code, r)
	assert.Contains(t, r.stdout, "2 dead letters shown, more follow (--limit 2 reached; --limit 0 lists all)")

	r = runBin(t, env, "-o", "json", "dlq", "ls", "--error-type", "PROCESSING_ERROR")
	require.Equal(t, ExitOK, r.code, r)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l), r.stdout)
	require.Len(t, l.Entries, 1)
	r = runBin(t, env, "dlq", "show", l.Entries[0].ID())
	require.Equal(t, ExitOK, r.code, r)
	for _, want := range []string{
		"entry:", "waitroom.registrations.dlq " + l.Entries[0].ID(),
		"error-type:", "PROCESSING_ERROR", "source-topic:", "attempts:", "header trace:", "abc",
		"payload (", `"itemId": "poison"`,
	} {
		assert.Contains(t, r.stdout, want)
	}

	r = runBin(t, env, "dlq", "show", "2/999")
	assert.Equal(t, ExitFailure, r.code, r)
	assert.Contains(t, r.stderr, "no such dead letter")
	assert.Contains(t, r.stderr, "dlq ls --topic registrations")

	r = runBin(t, env, "dlq", "replay", "--dry-run")
	require.Equal(t, ExitOK, r.code, r)
	assert.Regexp(t, `(?m)^\d+/\d+\s+would-replay\s+VALIDATION_ERROR`, r.stdout)
	assert.Regexp(t, `(?m)^\d+/\d+\s+still-invalid\s+PARSING_ERROR\s+\S+\s+tix\s+malformed message`, r.stdout)
	assert.Contains(t, r.stdout, "dry run: would replay 5 of 8 letters examined to waitroom.registrations; 3 kept back")
	assert.Contains(t, r.stdout, "Nothing was published or remembered.")

	r = runBin(t, env, "dlq", "replay", "--rate", "100")
	require.Equal(t, ExitOK, r.code, r)
	assert.Regexp(t, `(?m)^\d+/\d+\s+replayed\s+PROCESSING_ERROR\s+\S+\s+poison\s+waitroom\.registrations/\d+/\d+$`, r.stdout)
	assert.Contains(t, r.stdout, "replayed 5 of 8 letters examined to waitroom.registrations")
	assert.Contains(t, r.stdout, "Remembered in group waitroom-dlq-replay-waitroom.registrations.dlq")

	r = runBin(t, env, "dlq", "replay")
	require.Equal(t, ExitOK, r.code, r)
	assert.Contains(t, r.stdout, "nothing to replay")

	r = runBin(t, env, "-o", "json", "dlq", "replay", "--reset", "--dry-run", "--error-type", "VALIDATION_ERROR")
	require.Equal(t, ExitOK, r.code, r)
	var rep dlq.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	assert.Equal(t, 4, rep.Replayed)
	assert.Equal(t, 4, rep.NotMatched)

	r = runBin(t, env, "dlq", "ls", "--topic", "nope.dlq")
	assert.Equal(t, ExitFailure, r.code, r)
	assert.Contains(t, r.stderr, "topic does not exist (run `waitroomctl topics ensure`)")

	for _, args := range [][]string{
		{"dlq", "ls", "--error-type", "OOPS"}, {"dlq", "show", "abc"}, {"dlq", "show"}, {"dlq", "replay", "--rate", "-1"},
		{"dlq", "ls", "--topic", "orders"}, {"dlq", "ls", "--since", "yesterday"}, {"dlq", "bogus"}, {"dlq", "ls", "--nope"},
	} {
		r := runBin(t, env, args...)
		assert.Equal(t, ExitUsage, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "--help' for usage", args)
	}
}

func TestItemsSetOverKafkaAsAUser(t *testing.T) {
	brokers := testenv.Kafka(t, 3)
	env := []string{"WR_KAFKA_BROKERS=" + strings.Join(brokers, ",")}

	r := runBin(t, env, "items", "set", "ghost", "--rate", "5", "--max-active", "10", "--session-ttl", "2m")
	require.Equal(t, ExitOK, r.code, r)
	assert.Regexp(t, `(?m)^version:\s+1$`, r.stdout)
	assert.Regexp(t, `(?m)^rate:\s+5/s$`, r.stdout)
	assert.Contains(t, r.stdout, "new item published to waitroom.items")

	r = runBin(t, env, "items", "set", "ghost", "--stock", "0", "--enabled=false", "--name", "Ghost")
	require.Equal(t, ExitOK, r.code, r)
	assert.Regexp(t, `(?m)^version:\s+2$`, r.stdout)

	cache, err := itemcache.New([]kgo.Opt{kgo.SeedBrokers(brokers...)}, zap.NewNop())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _ = cache.Run(ctx) }()
	require.NoError(t, cache.Sync(ctx))
	s, ok := cache.Get("ghost")
	require.True(t, ok)
	s.UpdatedAt = 0
	assert.Equal(t, topics.ItemState{V: 1, ItemID: "ghost", Name: "Ghost", Stock: 0, Enabled: false, Version: 2,
		Policy: topics.AdmissionPolicy{RatePerSecond: 5, MaxActive: 10, SessionTTLSeconds: 120}}, s)

	// A pause keeps the rate, and --paused=false resumes at it.
	r = runBin(t, env, "items", "set", "ghost", "--paused")
	require.Equal(t, ExitOK, r.code, r)
	assert.Regexp(t, `(?m)^version:\s+3$`, r.stdout)
	assert.Regexp(t, `(?m)^rate:\s+5/s \(paused\)$`, r.stdout)
	r = runBin(t, env, "items", "set", "ghost", "--paused=false")
	require.Equal(t, ExitOK, r.code, r)
	assert.Regexp(t, `(?m)^version:\s+4$`, r.stdout)
	assert.Regexp(t, `(?m)^rate:\s+5/s$`, r.stdout)

	r = runBin(t, []string{"WR_KAFKA_BROKERS=127.0.0.1:1"}, "items", "set", "ghost", "--rate", "1", "--timeout", "500ms")
	assert.Equal(t, ExitFailure, r.code, r)
	assert.Contains(t, r.stderr, "is Kafka reachable?")
}

// fakeAdmin is a scheduler's admin API that serves two items and records
// the writes it gets.
type fakeAdmin struct {
	gets   atomic.Int32
	mu     sync.Mutex
	writes []string // "METHOD path body"
}

func (f *fakeAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Header.Get("Authorization") != "Bearer s3cret" {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"code":"UNAUTHORIZED","message":"a valid admin bearer token is required"}}`)
		return
	}
	view := `{"itemId":"concert","name":"Concert","stock":-1,"enabled":true,"paused":false,"policy":{"ratePerSecond":3,"maxActive":100,"sessionTTLSeconds":300},"version":7,"updatedAt":1,"waiting":1200,"admitted":40,"head":340,"seq":1540,"admittedLastMinute":180,"active":true}`
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/internal/admin/v1/items":
		f.gets.Add(1)
		_, _ = io.WriteString(w, `{"items":[`+view+`,{"itemId":"drop","name":"Drop","stock":0,"enabled":true,"paused":true,"policy":{"ratePerSecond":0,"maxActive":0,"sessionTTLSeconds":60},"version":2,"updatedAt":1,"waiting":5,"admitted":0,"head":0,"seq":5,"admittedLastMinute":0,"active":true}]}`)
	case r.URL.Path == "/internal/admin/v1/items/concert" || r.URL.Path == "/internal/admin/v1/items/concert/admission":
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.writes = append(f.writes, r.Method+" "+r.URL.Path+" "+string(b))
		f.mu.Unlock()
		_, _ = io.WriteString(w, view)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"code":"NOT_FOUND","message":"no route"}}`)
	}
}

func TestStatsAndItemsSetThroughAdminAPIAsAUser(t *testing.T) {
	fa := &fakeAdmin{}
	srv := httptest.NewServer(fa)
	defer srv.Close()
	env := []string{"WR_ADMIN_URL=" + srv.URL, "WR_ADMIN_TOKEN=s3cret"}

	r := runBin(t, env, "stats")
	require.Equal(t, ExitOK, r.code, r)
	assert.Regexp(t, `(?m)^\s*ITEM\s+STATE\s+RATE/S\s+MAX-ACTIVE\s+WAITING\s+ADMITTED\s+HEAD\s+REGISTERED\s+ADMITTED/MIN\s*$`, r.stdout)
	assert.Regexp(t, `(?m)^\s*concert\s+open\s+3\s+100\s+1200\s+40\s+340\s+1540\s+180\s*$`, r.stdout)
	assert.Regexp(t, `(?m)^\s*drop\s+sold-out\s+0\s+0\s+5\s+0\s+0\s+5\s+0\s*$`, r.stdout)
	assert.Regexp(t, `(?m)^\s*TOTAL \(2\)\s+1205\s+40\s+1545\s+180\s*$`, r.stdout)

	r = runBin(t, env, "-o", "json", "stats")
	require.Equal(t, ExitOK, r.code, r)
	var snap statsSnapshot
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &snap), r.stdout)
	require.Len(t, snap.Items, 2)
	assert.Equal(t, int64(340), snap.Items[0].Head)

	r = runBin(t, []string{"WR_ADMIN_URL=" + srv.URL}, "stats", "--admin-token", "wrong")
	assert.Equal(t, ExitFailure, r.code, r)
	assert.Contains(t, r.stderr, "refused the token (401): set --admin-token or WR_ADMIN_TOKEN")
	r = runBin(t, []string{"WR_ADMIN_URL=" + srv.URL}, "stats")
	assert.Equal(t, ExitUsage, r.code, r)
	r = runBin(t, nil, "stats", "--admin-url", "http://127.0.0.1:1", "--admin-token", "x")
	assert.Equal(t, ExitFailure, r.code, r)
	assert.Contains(t, r.stderr, "cannot reach the admin API at http://127.0.0.1:1 (is a scheduler running?")

	// --watch redraws until Ctrl-C, then exits 0.
	cmd := command(t, env, "stats", "--watch", "--interval", "100ms")
	var out bytes.Buffer
	cmd.Stdout = &out
	before := fa.gets.Load()
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { return fa.gets.Load() >= before+3 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), out.String())
	assert.GreaterOrEqual(t, strings.Count(out.String(), "\x1b[H\x1b[2J"), 3, "redrawn in place")
	assert.Contains(t, out.String(), "every 100ms (Ctrl-C to stop)")

	r = runBin(t, env, "items", "set", "concert", "--stock", "5", "--rate", "3", "--session-ttl", "5m")
	require.Equal(t, ExitOK, r.code, r)
	assert.Contains(t, r.stdout, "applied through the admin API at "+srv.URL)
	assert.Regexp(t, `(?m)^version:\s+7$`, r.stdout)
	fa.mu.Lock()
	assert.Equal(t, []string{
		`POST /internal/admin/v1/items/concert {"stock":5}`,
		`PUT /internal/admin/v1/items/concert/admission {"ratePerSecond":3,"sessionTTLSeconds":300}`,
	}, fa.writes)
	fa.writes = nil
	fa.mu.Unlock()

	r = runBin(t, env, "items", "set", "concert", "--paused")
	require.Equal(t, ExitOK, r.code, r)
	fa.mu.Lock()
	assert.Equal(t, []string{`PUT /internal/admin/v1/items/concert/admission {"paused":true}`}, fa.writes)
	fa.mu.Unlock()
}

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// BenchmarkStatusReads reads the status of 1,000 waiting registrations round
// robin, one read at a time over real HTTP, with the per-token status bucket
// in the replica's memory (at a rate no read reaches: the bucket is
// consulted, never refuses), in Redis like the other buckets, and off. It
// reports the Redis commands a read costs (INFO commandstats, the INFO calls
// themselves left out) beside ns/op. Figures and command: BENCHMARKS.md.
func BenchmarkStatusReads(b *testing.B) {
	for _, c := range []struct {
		name  string
		rate  int
		redis bool
	}{{"bucket-in-memory", 100_000, false}, {"bucket-in-redis", 100_000, true}, {"bucket-off", 0, false}} {
		b.Run(c.name, func(b *testing.B) {
			if c.redis {
				defer httpapi.KeepStatusBucketsInRedis()()
			}
			url, addr := benchAPI(b, func(cfg *httpapi.Config) {
				cfg.Throttle = httpapi.ThrottleConfig{StatusRate: c.rate, StatusBurst: c.rate, Period: time.Minute}
			})
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			toks := benchPlaces(b, url, rdb, 1000)
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			read := func(tok string) {
				resp, err := hc.Get(url + "/api/v1/items/drop/registrations/" + tok)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status read: %d", resp.StatusCode)
				}
			}
			for _, tok := range toks { // the first, exact read of each
				read(tok)
			}
			before := redisCalls(b, rdb)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				read(toks[i%len(toks)])
			}
			b.StopTimer()
			b.ReportMetric(float64(redisCalls(b, rdb)-before)/float64(b.N), "redis-cmds/read")
		})
	}
}

// benchPlaces registers n people over HTTP and applies them to the line, as
// the consumer would; it returns their queue tokens.
func benchPlaces(b *testing.B, url string, rdb *redis.Client, n int) []string {
	b.Helper()
	signer, err := token.New(token.HS256, testKey, "k1")
	if err != nil {
		b.Fatal(err)
	}
	line := queue.New(rdb)
	toks := make([]string, 0, n)
	ops := make([]queue.Op, 0, n)
	for i := range n {
		resp, err := http.Post(url+"/api/v1/items/drop/registrations", "application/json", bytes.NewReader([]byte(`{"userId":"u`+strconv.Itoa(i)+`"}`)))
		if err != nil {
			b.Fatal(err)
		}
		var r httpapi.RegisterResponse
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusAccepted {
			b.Fatalf("register %d: %d %v", i, resp.StatusCode, err)
		}
		q, err := signer.ParseQueue(r.Token)
		if err != nil {
			b.Fatal(err)
		}
		toks = append(toks, r.Token)
		ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: "drop", TokenID: q.TokenID, UserID: q.PlaceKey(), Partition: q.Partition, Offset: q.Offset})
	}
	if _, err := line.Apply(context.Background(), ops); err != nil {
		b.Fatal(err)
	}
	return toks
}

// redisCalls is how many commands Redis has run, INFO left out.
func redisCalls(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		c, _ := strconv.ParseInt(v, 10, 64)
		n += c
	}
	return n
}

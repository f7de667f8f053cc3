package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// BenchmarkRegisterUnderFlood measures one address's registrations (one at a
// time, over real HTTP, through the api's whole register path: the throttle
// in Redis, a produce acknowledged by kfake) alone, then while another
// address floods the same api with concurrent registrations that its bucket
// refuses 429. It reports each run's p50 and p99 in ms and, in the flood
// runs, the flood's 429s and 202s a second and the p99 over the p99 alone;
// the figures and command are in BENCHMARKS.md. Run it with a fixed count, e.g. -benchtime 400x.
func BenchmarkRegisterUnderFlood(b *testing.B) {
	url := floodAPI(b)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	post := func(ip, user string) int {
		req, _ := http.NewRequest(http.MethodPost, url+"/api/v1/items/drop/registrations", bytes.NewReader([]byte(`{"userId":"`+user+`"}`)))
		req.Header.Set("X-Forwarded-For", ip)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	calm := func(b *testing.B, ip string) (p50, p99 float64) {
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if code := post(ip, "calm-"+ip+"-"+strconv.Itoa(i)); code != http.StatusAccepted {
				b.Fatalf("calm registration %d: %d", i, code)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
		b.ReportMetric(ms(0.5), "p50-ms")
		b.ReportMetric(ms(0.99), "p99-ms")
		return ms(0.5), ms(0.99)
	}
	var alone99 float64
	run := 0
	b.Run("alone", func(b *testing.B) {
		run++
		_, alone99 = calm(b, "198.51.100."+strconv.Itoa(run))
	})
	// The flood: 8 connections as fast as they go (on the same 2 cores as
	// the api: it takes CPU from everyone), and 2,000 requests a second
	// (20 times the bucket's rate) sent by a ticker, the way a flood from
	// elsewhere arrives.
	for _, perSecond := range []int{0, 2000} {
		name := "flood-saturating"
		if perSecond > 0 {
			name = "flood-" + strconv.Itoa(perSecond) + "/s"
		}
		b.Run(name, func(b *testing.B) {
			run++
			ctx, cancel := context.WithCancel(context.Background())
			var refused, passed atomic.Int64
			var wg sync.WaitGroup
			first429 := make(chan struct{})
			var once sync.Once
			var pace chan struct{}
			if perSecond > 0 {
				pace = make(chan struct{}, 64)
				wg.Add(1)
				go func() {
					defer wg.Done()
					tk := time.NewTicker(time.Millisecond)
					defer tk.Stop()
					for sent := 0; ; {
						select {
						case <-ctx.Done():
							return
						case <-tk.C:
						}
						for ; sent < perSecond/1000; sent++ {
							select {
							case pace <- struct{}{}:
							default: // the workers are behind: the flood sheds
							}
						}
						sent = 0
					}
				}()
			}
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ctx.Err() == nil; i++ {
						if pace != nil {
							select {
							case <-ctx.Done():
								return
							case <-pace:
							}
						}
						switch post("203.0.113.7", "flood-"+strconv.Itoa(w)+"-"+strconv.Itoa(i)) {
						case http.StatusTooManyRequests:
							refused.Add(1)
							once.Do(func() { close(first429) })
						case http.StatusAccepted:
							passed.Add(1)
						}
					}
				}()
			}
			<-first429 // the flood's bucket is empty: from here it is refused
			r0, p0 := refused.Load(), passed.Load()
			start := time.Now()
			_, p99 := calm(b, "198.51.100."+strconv.Itoa(run))
			took := time.Since(start)
			r1, p1 := refused.Load(), passed.Load()
			cancel()
			wg.Wait()
			b.ReportMetric(float64(r1-r0)/took.Seconds(), "flood-429/s")
			b.ReportMetric(float64(p1-p0)/took.Seconds(), "flood-202/s")
			if alone99 > 0 {
				b.ReportMetric(p99/alone99, "p99-ratio")
			}
		})
	}
}

// floodAPI starts an api whose address buckets take 100 registrations a
// second with a burst of 2,000 (the calm address never empties its own).
func floodAPI(b *testing.B) string {
	b.Helper()
	url, _ := benchAPI(b, func(cfg *httpapi.Config) {
		cfg.Throttle = httpapi.ThrottleConfig{IPRate: 6000, IPBurst: 2000, Period: time.Minute}
	})
	return url
}

// benchAPI runs an api over kfake and its own redis-server for a benchmark,
// with the item "drop", its config changed by set; it returns the api's URL
// and the Redis address.
func benchAPI(b *testing.B, set func(*httpapi.Config)) (url, redisAddr string) {
	b.Helper()
	brokers := testenv.Kafka(b, 3)
	rds := testenv.StartRedis(b)
	ctx := context.Background()
	kcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		b.Fatal(err)
	}
	it := topics.ItemState{V: topics.Version, ItemID: "drop", Name: "drop", Stock: topics.Unlimited, Enabled: true,
		Policy: topics.AdmissionPolicy{RatePerSecond: 50, SessionTTLSeconds: 60}, Version: 1, UpdatedAt: 1}
	if err := kcl.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte("drop"), Value: topics.Encode(&it)}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	kcl.Close()
	if err := view.SetReady(ctx, rds.Client(), "bench", nil, time.Now()); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Defaults[httpapi.Config]()
	if err != nil {
		b.Fatal(err)
	}
	cfg.Kafka.Brokers, cfg.Redis.Addr = brokers, rds.Addr
	cfg.TokenKey, cfg.AdmissionKey = testKey, admissionKey
	cfg.TrustedProxies = []string{"127.0.0.1/32"} // the bench's addresses come in X-Forwarded-For
	set(&cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	ready := &httpserver.Readiness{}
	done := make(chan error, 1)
	go func() { done <- httpapi.Run(rctx, cfg, ln, zap.NewNop(), ready) }()
	b.Cleanup(func() { stop(); <-done })
	for deadline := time.Now().Add(30 * time.Second); !ready.Healthy(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("api not ready")
		}
	}
	return "http://" + ln.Addr().String(), rds.Addr
}

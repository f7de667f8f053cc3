// Package fence makes the schedulers' writes to waitroom.admissions Kafka
// transactions under one transactional id per shard, so that whoever takes
// an id over (a new leader of the shard, or a rebuild about to read the
// topic) fences every earlier holder: its open transaction is aborted and
// whatever it sends later is refused by the broker, however late it lands.
package fence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultPrefix is the schedulers' transactional id prefix
// (WR_SCHEDULER_TRANSACTIONAL_ID).
const DefaultPrefix = "waitroom-scheduler"

// MaxShards is the most shards a scheduler runs (promote.Options.Shards):
// a rebuild fences the ids of all of them, whatever the count in use.
const MaxShards = 64

// Timeout is the transaction timeout: how long a dead leader's open
// transaction holds the read_committed readers of its partitions (their
// last stable offset) before the coordinator aborts it.
const Timeout = 10 * time.Second

// ID is the transactional id of shard under prefix.
func ID(prefix string, shard int) string { return prefix + "-" + strconv.Itoa(shard) }

// IDs are the transactional ids of every shard a scheduler may run.
func IDs(prefix string) []string {
	ids := make([]string, MaxShards)
	for i := range ids {
		ids[i] = ID(prefix, i)
	}
	return ids
}

// Fence takes every id over with InitProducerID, through cl (franz-go sends
// it to the id's transaction coordinator): an open transaction of an id is
// aborted (its abort marker written) before the answer, and its producer's
// epoch is bumped, so nothing it sends afterwards is accepted. Each id costs
// one round trip to its coordinator; the ids are fenced concurrently.
func Fence(ctx context.Context, cl *kgo.Client, ids ...string) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = fenceOne(ctx, cl, id) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fenceOne fences id, retrying while the coordinator is busy (an abort in
// progress answers CONCURRENT_TRANSACTIONS until its markers are written).
func fenceOne(ctx context.Context, cl *kgo.Client, id string) error {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = &id
	req.TransactionTimeoutMillis = int32(Timeout.Milliseconds())
	req.ProducerID, req.ProducerEpoch = -1, -1
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, kerr.ConcurrentTransactions) && !kerr.IsRetriable(err) {
			return fmt.Errorf("fence transactional id %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fence transactional id %s: %w (last: %w)", id, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// Producer produces in transactions under one transactional id: every
// ProduceSync is one transaction, committed only when every record of it
// was written. A producer that failed once (fenced, or anything else) is
// never used again: Ready makes a new client, whose InitProducerID takes the
// id over again. Not safe for concurrent use.
type Producer struct {
	id   string
	opts []kgo.Opt
	cl   *kgo.Client
}

// NewProducer returns a producer of transactional id id with clients built
// from opts (seed brokers, TLS, SASL, acks...). It connects on Ready.
func NewProducer(id string, opts ...kgo.Opt) *Producer {
	return &Producer{id: id, opts: opts}
}

// Ready makes sure the producer holds the id with a producer epoch taken
// now or earlier (a new client's InitProducerID after a failure). A caller
// that checks a condition after Ready and then produces is fenced by anyone
// who takes the id over after the check.
func (p *Producer) Ready(ctx context.Context) error {
	if p.cl != nil {
		return nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, p.opts...), kgo.TransactionalID(p.id),
		kgo.TransactionTimeout(Timeout), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))...)
	if err != nil {
		return fmt.Errorf("transactional client %s: %w", p.id, err)
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return fmt.Errorf("init producer id of %s: %w", p.id, err)
	}
	p.cl = cl
	return nil
}

// ProduceSync writes recs in one transaction and commits it. When any
// record failed or the commit did, the transaction is aborted, every
// result carries the error (nothing of it is readable read_committed), and
// the client is dropped (the next Ready makes a new one). Without Ready
// first, every record fails.
func (p *Producer) ProduceSync(ctx context.Context, recs ...*kgo.Record) kgo.ProduceResults {
	if p.cl == nil {
		return failAll(recs, fmt.Errorf("transactional producer %s: not ready", p.id))
	}
	err := p.cl.BeginTransaction()
	var res kgo.ProduceResults
	if err == nil {
		res = p.cl.ProduceSync(ctx, recs...)
		err = res.FirstErr()
	}
	if err == nil {
		err = p.cl.EndTransaction(ctx, kgo.TryCommit)
	}
	if err == nil {
		return res
	}
	p.drop()
	return failAll(recs, fmt.Errorf("transaction of %s: %w", p.id, err))
}

// drop closes the client without ending its transaction: the next Ready's
// InitProducerID (or the next leader's, or a rebuild's, or the transaction
// timeout) aborts whatever of it is still open. An abort through this
// client could instead re-initialize its producer id (franz-go does after a
// commit of unknown outcome) and fence whoever holds the id by then.
func (p *Producer) drop() {
	p.cl.Close()
	p.cl = nil
}

// Client is the producer's client while it is ready (nil otherwise).
func (p *Producer) Client() *kgo.Client { return p.cl }

// Close closes the client (an open transaction is aborted by the next
// holder of the id, or by its timeout).
func (p *Producer) Close() {
	if p.cl != nil {
		p.drop()
	}
}

func failAll(recs []*kgo.Record, err error) kgo.ProduceResults {
	res := make(kgo.ProduceResults, len(recs))
	for i, r := range recs {
		res[i] = kgo.ProduceResult{Record: r, Err: err}
	}
	return res
}

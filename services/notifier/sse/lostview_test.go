package sse

import "testing"

// The channel streams watch is closed once per loss and replaced only once
// the view is back, by whichever notices first (the watcher or the gate): a
// stream opened after the view came back never watches the closed channel,
// and no stream is left watching a channel a later loss does not close.
func TestLostViewRegainsOnce(t *testing.T) {
	var l lostView
	if l.current() != nil {
		t.Fatal("before SetView there is nothing to watch")
	}
	l.regain()
	first := l.current()
	l.regain() // the gate, while the view stays trusted: same channel
	if l.current() != first {
		t.Fatal("a regain of a trusted view replaced the open channel: streams on it would miss the next loss")
	}
	l.lose()
	l.lose() // the watcher again, still lost: no double close
	select {
	case <-first:
	default:
		t.Fatal("a loss did not close the channel")
	}
	l.regain() // the gate saw the view back before the watcher
	second := l.current()
	select {
	case <-second:
		t.Fatal("a stream opened after the view came back would end at once")
	default:
	}
	l.regain() // then the watcher
	if l.current() != second {
		t.Fatal("the watcher replaced the gate's channel: streams opened in between would miss the next loss")
	}
	l.lose()
	select {
	case <-second:
	default:
		t.Fatal("the next loss did not reach the streams opened after the first")
	}
}

// Once the hub stopped the channel is closed for good: a regain by the gate
// or the watcher afterwards does not reopen it for the streams still open.
func TestLostViewEndsForGood(t *testing.T) {
	var l lostView
	l.regain()
	open := l.current()
	l.end()
	select {
	case <-open:
	default:
		t.Fatal("the end did not close the channel the streams watch")
	}
	l.regain()
	l.lose() // no double close
	l.end()
	select {
	case <-l.current():
	default:
		t.Fatal("a regain after the end reopened the channel")
	}
}

// A server's streams watch one channel for the view and the hub: it closes
// when the hub stops, whether the server was made before or after the stop.
func TestServerEndingClosesWhenTheHubStops(t *testing.T) {
	h := NewHub(nil)
	before := NewServer(h, nil, nil, nil, nil, Options{}, nil, nil)
	ending := before.ending()
	select {
	case <-ending:
		t.Fatal("closed before the hub stopped")
	default:
	}
	h.Stop()
	select {
	case <-ending:
	default:
		t.Fatal("the hub stopped and the streams' channel is still open")
	}
	after := NewServer(h, nil, nil, nil, nil, Options{}, nil, nil)
	select {
	case <-after.ending():
	default:
		t.Fatal("a server made on a stopped hub watches an open channel")
	}
}

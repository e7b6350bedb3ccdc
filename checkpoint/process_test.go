package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/quarantine"
)

var t0 = time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)

const (
	relayURL    = "https://relay.example"
	peerKey     = "rVaWBmcprT7OEYgLEuHVEB40X7fBF/nJx+omHznb4P4="
	strangerKey = "FUXk5FNVq/ofFbA/ybKIH9N0/ClqW29kM2uu0KlMX28="
)

var bucketMailbox = []byte("test-mailbox")

// mailbox is a Handler that stores envelopes and receipts by item id in a bucket of its own, with
// dedup, and refuses what the test asks it to.
type mailbox struct {
	reject map[string]Verdict // item id → verdict
	fail   map[string]error   // item id → error
	calls  []string           // item ids handed over, in order (including rolled-back calls)
}

func (m *mailbox) handle(tx *bbolt.Tx, it Item) (Verdict, error) {
	m.calls = append(m.calls, it.ItemID)
	if err := m.fail[it.ItemID]; err != nil {
		// Write something first, to prove a failing item leaves no trace.
		b, _ := tx.CreateBucketIfNotExists(bucketMailbox)
		if err2 := b.Put([]byte("partial:"+it.ItemID), []byte("x")); err2 != nil {
			return Verdict{}, err2
		}
		return Verdict{}, err
	}
	if v, ok := m.reject[it.ItemID]; ok {
		return v, nil
	}
	if it.Sender != peerKey {
		return Rejected(quarantine.CauseUnpaired, "sender is not a paired host"), nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketMailbox)
	if err != nil {
		return Verdict{}, err
	}
	if b.Get([]byte(it.ItemID)) != nil {
		return Duplicate(), nil
	}
	if err := b.Put([]byte(it.ItemID), slices.Clone(it.Wire)); err != nil {
		return Verdict{}, err
	}
	return Accepted(), nil
}

func (m *mailbox) HandleEnvelope(tx *bbolt.Tx, it Item) (Verdict, error) { return m.handle(tx, it) }
func (m *mailbox) HandleReceipt(tx *bbolt.Tx, it Item) (Verdict, error)  { return m.handle(tx, it) }
func (m *mailbox) HandleExpired(tx *bbolt.Tx, it Item) (Verdict, error)  { return m.handle(tx, it) }

func openStore(t *testing.T, path string) *Store {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "state.db")
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q, err := quarantine.Open(db, &quarantine.Options{Clock: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(db, q, &Options{Clock: func() time.Time { return t0 }, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pitem(seq int64, id string) mbx.PullItem {
	return mbx.PullItem{Seq: seq, Kind: mbx.ItemKindEnvelope, ItemID: id, SenderPubkey: peerKey,
		WireB64: mbx.B64([]byte(`{"id":"` + id + `"}`))}
}

func page(epoch string, head int64, items ...mbx.PullItem) mbx.PullResponse {
	last := int64(0)
	for _, it := range items {
		last = max(last, it.Seq)
	}
	return mbx.PullResponse{Epoch: epoch, HeadSeq: head, Items: items, LastSeq: last}
}

func stored(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := s.DB().View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketMailbox)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error { out[string(k)] = string(v); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustProcess(t *testing.T, s *Store, after int64, p mbx.PullResponse, h Handler) Result {
	t.Helper()
	res, err := s.ProcessPage(context.Background(), relayURL, after, p, h)
	if err != nil {
		t.Fatalf("process page after %d: %v", after, err)
	}
	return res
}

func TestProcessInOrderAndAdvances(t *testing.T) {
	s := openStore(t, "")
	h := &mailbox{}
	res := mustProcess(t, s, 0, page("ep1", 300, pitem(300, "c"), pitem(100, "a"), pitem(200, "b")), h)
	if got, want := h.calls, []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v (seq order)", got, want)
	}
	if res.Position.ReceivedThrough != 300 || res.Position.Epoch != "ep1" || res.Accepted != 3 || res.Reset != 0 {
		t.Fatalf("result %+v, want through 300 in ep1, 3 accepted, no reset", res)
	}
	pos, err := s.Position(context.Background(), relayURL)
	if err != nil {
		t.Fatal(err)
	}
	if pos.ReceivedThrough != 300 || pos.Epoch != "ep1" {
		t.Fatalf("committed position %+v, want ep1/300", pos)
	}
	if got := stored(t, s); got["a"] != `{"id":"a"}` || len(got) != 3 {
		t.Fatalf("mailbox %v, want a, b, c with their exact wire", got)
	}
}

func TestDuplicatedAndOverlappingPagesAreHarmless(t *testing.T) {
	s := openStore(t, "")
	h := &mailbox{}
	p1 := page("ep1", 300, pitem(100, "a"), pitem(200, "b"))
	mustProcess(t, s, 0, p1, h)
	// The same page again (a lost ack, a retried pull): everything is skipped.
	res := mustProcess(t, s, 0, p1, h)
	if res.Skipped != 2 || res.Done() != 0 || res.Position.ReceivedThrough != 200 {
		t.Fatalf("repeat: %+v, want 2 skipped, nothing done, through 200", res)
	}
	// An overlapping page with one new item, containing a seq twice.
	res = mustProcess(t, s, 100, page("ep1", 300, pitem(200, "b"), pitem(300, "c"), pitem(300, "c")), h)
	if res.Skipped != 2 || res.Accepted != 1 || res.Position.ReceivedThrough != 300 {
		t.Fatalf("overlap: %+v, want 2 skipped, 1 accepted, through 300", res)
	}
	if got, want := h.calls, []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("handled %v, want each item once: %v", got, want)
	}
}

func TestRejectedGoesToQuarantineAndPositionAdvances(t *testing.T) {
	s := openStore(t, "")
	h := &mailbox{reject: map[string]Verdict{"b": Rejected(quarantine.CauseUndecryptable, "no enc key opens it")}}
	bad := pitem(250, "bad-b64")
	bad.WireB64 = "!!not base64!!"
	odd := pitem(260, "odd")
	odd.Kind = "gossip"
	stranger := pitem(270, "s1")
	stranger.SenderPubkey = strangerKey
	nokey := pitem(280, "s2")
	nokey.SenderPubkey = strings.Repeat("x", 300) // not a key: can never be paired
	res := mustProcess(t, s, 0, page("ep1", 300, pitem(100, "a"), pitem(200, "b"), bad, odd, stranger, nokey, pitem(300, "c")), h)
	if res.Position.ReceivedThrough != 300 || res.Accepted != 2 || res.Quarantined != 5 {
		t.Fatalf("result %+v, want through 300, 2 accepted, 5 quarantined", res)
	}
	entries, err := s.Quarantine().List(context.Background(), quarantine.Filter{WithWire: true})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		seq   int64
		cause quarantine.Cause
		wire  string
	}
	var got []row
	for _, e := range entries {
		got = append(got, row{e.Seq, e.Cause, string(e.Wire)})
		if e.Relay != relayURL || e.Epoch != "ep1" || !e.At.Equal(t0) {
			t.Errorf("entry %d: relay %q epoch %q at %v", e.Seq, e.Relay, e.Epoch, e.At)
		}
	}
	want := []row{
		{200, quarantine.CauseUndecryptable, `{"id":"b"}`},
		{250, quarantine.CauseMalformed, "!!not base64!!"},
		{260, quarantine.CauseUnknownKind, `{"id":"odd"}`},
		{270, quarantine.CauseUnpaired, `{"id":"s1"}`},
		{280, quarantine.CauseMalformed, `{"id":"s2"}`},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("quarantine = %+v, want %+v", got, want)
	}
	if slices.Contains(h.calls, "odd") || slices.Contains(h.calls, "bad-b64") {
		t.Fatalf("handler saw %v; malformed and unknown kinds must not reach it", h.calls)
	}
}

func TestHandlerErrorStopsAdvancing(t *testing.T) {
	s := openStore(t, "")
	errDisk := errors.New("disk on fire")
	h := &mailbox{fail: map[string]error{"c": errDisk}}
	p := page("ep1", 500, pitem(100, "a"), pitem(200, "b"), pitem(300, "c"), pitem(400, "d"), pitem(500, "e"))
	res, err := s.ProcessPage(context.Background(), relayURL, 0, p, h)
	if !errors.Is(err, ErrHandler) || !errors.Is(err, errDisk) {
		t.Fatalf("err = %v, want ErrHandler wrapping the handler's error", err)
	}
	if res.Position.ReceivedThrough != 200 || res.Accepted != 2 {
		t.Fatalf("result %+v, want through 200 with a and b accepted", res)
	}
	got := stored(t, s)
	if len(got) != 2 || got["a"] == "" || got["b"] == "" {
		t.Fatalf("mailbox %v, want exactly a and b (no partial write of c, nothing after it)", got)
	}
	if slices.Contains(h.calls, "d") {
		t.Fatalf("handled %v: nothing after the failing item may be handed over", h.calls)
	}
	pos, _ := s.Position(context.Background(), relayURL)
	if pos.ReceivedThrough != 200 {
		t.Fatalf("committed through %d, want 200", pos.ReceivedThrough)
	}

	// The failure at the very first item commits nothing and reports the unchanged position.
	res, err = s.ProcessPage(context.Background(), relayURL, 200, page("ep1", 500, pitem(300, "c"), pitem(400, "d")), h)
	if !errors.Is(err, errDisk) || res.Position.ReceivedThrough != 200 || res.Done() != 0 {
		t.Fatalf("first item fails: %+v, %v; want through 200, nothing done", res, err)
	}

	// Once the handler recovers, the same items go through exactly once.
	delete(h.fail, "c")
	res = mustProcess(t, s, 200, p, h)
	if res.Position.ReceivedThrough != 500 || res.Accepted != 3 || res.Skipped != 2 {
		t.Fatalf("after recovery: %+v, want through 500, 3 accepted, 2 skipped", res)
	}
}

func TestEpochChangeResets(t *testing.T) {
	s := openStore(t, "")
	h := &mailbox{}
	mustProcess(t, s, 0, page("ep1", 300, pitem(100, "a"), pitem(300, "c")), h)

	// A page of another epoch pulled after 300 cannot be used: reset, nothing processed.
	res := mustProcess(t, s, 300, page("ep2", 900, pitem(900, "z")), h)
	if res.Reset != ResetEpochChanged || res.Position.Epoch != "ep2" || res.Position.ReceivedThrough != 0 || res.Done() != 0 {
		t.Fatalf("result %+v, want an epoch-changed reset to ep2/0 with nothing done", res)
	}
	if lr := res.Position.LastReset; lr == nil || lr.FromEpoch != "ep1" || lr.FromThrough != 300 || res.Position.Resets != 1 {
		t.Fatalf("last reset %+v (resets %d), want from ep1/300, one reset", lr, res.Position.Resets)
	}
	// The re-pull from 0 of the new epoch: items already in the mailbox are duplicates.
	res = mustProcess(t, s, 0, page("ep2", 900, pitem(500, "a"), pitem(900, "z")), h)
	if res.Duplicates != 1 || res.Accepted != 1 || res.Position.ReceivedThrough != 900 || res.Reset != 0 {
		t.Fatalf("re-pull: %+v, want 1 duplicate, 1 accepted, through 900", res)
	}

	// A page of yet another epoch pulled from 0 is reset and processed in one go.
	res = mustProcess(t, s, 0, page("ep3", 10, pitem(10, "n")), h)
	if res.Reset != ResetEpochChanged || res.Accepted != 1 || res.Position.ReceivedThrough != 10 {
		t.Fatalf("epoch change from 0: %+v, want reset and 1 accepted through 10", res)
	}
}

func TestRewindInSameEpochResets(t *testing.T) {
	s := openStore(t, "")
	h := &mailbox{}
	mustProcess(t, s, 0, page("ep1", 300, pitem(100, "a"), pitem(300, "c")), h)
	// head_seq below received_through in the same epoch: the store went back in time.
	res := mustProcess(t, s, 300, page("ep1", 150), h)
	if res.Reset != ResetRewound || res.Position.ReceivedThrough != 0 || res.Position.Epoch != "ep1" {
		t.Fatalf("result %+v, want a rewound reset to ep1/0", res)
	}
	res = mustProcess(t, s, 0, page("ep1", 150, pitem(100, "a"), pitem(150, "b")), h)
	if res.Duplicates != 1 || res.Accepted != 1 || res.Position.ReceivedThrough != 150 {
		t.Fatalf("re-pull: %+v, want a duplicate, b accepted, through 150", res)
	}
}

func TestStalePageChangesNothing(t *testing.T) {
	s := openStore(t, "")
	h := &mailbox{}
	mustProcess(t, s, 0, page("ep1", 300, pitem(100, "a")), h)
	_, err := s.ProcessPage(context.Background(), relayURL, 250, page("ep1", 300, pitem(300, "c")), h)
	if !errors.Is(err, ErrStalePage) {
		t.Fatalf("err = %v, want ErrStalePage", err)
	}
	if pos, _ := s.Position(context.Background(), relayURL); pos.ReceivedThrough != 100 {
		t.Fatalf("position %d, want 100 unchanged", pos.ReceivedThrough)
	}
	if slices.Contains(h.calls, "c") {
		t.Fatal("a stale page reached the handler")
	}
}

func TestBadInput(t *testing.T) {
	s := openStore(t, "")
	h := &mailbox{}
	tests := []struct {
		name  string
		relay string
		after int64
		p     mbx.PullResponse
		h     Handler
	}{
		{"empty relay", "", 0, page("ep1", 1), h},
		{"empty epoch", relayURL, 0, page("", 1), h},
		{"negative after", relayURL, -1, page("ep1", 1), h},
		{"nil handler", relayURL, 0, page("ep1", 1), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.ProcessPage(context.Background(), tc.relay, tc.after, tc.p, tc.h); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	// A verdict that is not one of the three stops the page like a handler error.
	bad := &mailbox{reject: map[string]Verdict{"a": {Outcome: OutcomeRejected}}}
	_, err := s.ProcessPage(context.Background(), relayURL, 0, page("ep1", 1, pitem(1, "a")), bad)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("rejection without a cause: err = %v, want ErrInvalid", err)
	}
	if pos, _ := s.Position(context.Background(), relayURL); pos.ReceivedThrough != 0 || pos.Epoch != "" {
		t.Fatalf("position %+v, want untouched", pos)
	}
}

func TestReset(t *testing.T) {
	s := openStore(t, "")
	mustProcess(t, s, 0, page("ep1", 300, pitem(300, "c")), &mailbox{})
	ctx := context.Background()
	p, changed, err := s.Reset(ctx, relayURL, "", ResetRotated)
	if err != nil || !changed || p.Epoch != "ep1" || p.ReceivedThrough != 0 || p.LastReset.Reason != ResetRotated {
		t.Fatalf("reset: %+v changed=%v err=%v", p, changed, err)
	}
	if _, changed, _ := s.Reset(ctx, relayURL, "", ResetRotated); changed {
		t.Fatal("second reset to the same place: changed = true")
	}
	if _, _, err := s.Reset(ctx, relayURL, "", 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("reset without reason: err = %v, want ErrInvalid", err)
	}
	ps, err := s.Positions(ctx)
	if err != nil || len(ps) != 1 || ps[0].Relay != relayURL {
		t.Fatalf("positions %+v, %v", ps, err)
	}
	b, _ := json.Marshal(ps[0])
	var back Position
	if err := json.Unmarshal(b, &back); err != nil || back.LastReset.Reason != ResetRotated {
		t.Fatalf("position JSON %s does not round trip: %+v %v", b, back, err)
	}
}

func TestResetReasonNames(t *testing.T) {
	for r := ResetReason(0); r <= ResetRequested; r++ {
		b, _ := r.MarshalText()
		var back ResetReason
		if err := back.UnmarshalText(b); err != nil || back != r {
			t.Errorf("%v: round trip gave %v, %v", r, back, err)
		}
	}
	if got := fmt.Sprint(ResetReason(77)); got != "ResetReason(77)" {
		t.Errorf("String of an unknown reason = %q", got)
	}
}

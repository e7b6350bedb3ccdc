package mbx

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// One AcceptBuf reused for many statements gives each result the bytes and signature a fresh
// AcceptedResult gives it, and no later statement changes an earlier result: through arena
// growth, statements with several targets, and statements only the generic encoder spells.
func TestAcceptBufResultsAreFreshResults(t *testing.T) {
	relay, err := GenerateSigningKey(strings.NewReader(strings.Repeat("r", 32)))
	if err != nil {
		t.Fatal(err)
	}
	var buf AcceptBuf
	var got, want []PushResult
	at := time.UnixMilli(1773480413589)
	for i := range 60 {
		id := fmt.Sprintf("item-%d", i)
		if i%7 == 3 {
			id = fmt.Sprintf("ümlaut \"%d\"", i) // not plain: the generic encoders write it
		}
		targets := make([]AcceptTarget, 1+i%4)
		for j := range targets {
			targets[j] = AcceptTarget{HostPubkey: relay.PublicKey(), Seq: int64(1000*i + j), WireHash: WireHash([]byte(id))}
		}
		a := NewAccept(relay.PublicKey(), "epoch-1", relay.PublicKey(), id, targets, at.Add(time.Duration(i)*time.Millisecond))
		r, err := buf.Result(relay, StatusAccepted, a)
		if err != nil {
			t.Fatal(err)
		}
		w, err := AcceptedResult(relay, StatusAccepted, a)
		if err != nil {
			t.Fatal(err)
		}
		got, want = append(got, r), append(want, w)
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("result %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
		if _, _, err := ValidAccept(got[i], relay.PublicKey(), relay.PublicKey(), want[i].ItemID,
			relay.PublicKey(), WireHash([]byte(want[i].ItemID))); err != nil {
			t.Fatalf("result %d does not verify: %v", i, err)
		}
	}
}

// After Reset an AcceptBuf writes over its arena and its results are still fresh results.
func TestAcceptBufReset(t *testing.T) {
	relay, err := GenerateSigningKey(strings.NewReader(strings.Repeat("r", 32)))
	if err != nil {
		t.Fatal(err)
	}
	var buf AcceptBuf
	at := time.UnixMilli(1773480413589)
	for round := range 3 {
		for i := range 5 {
			a := NewAccept(relay.PublicKey(), "epoch-1", relay.PublicKey(), fmt.Sprintf("item-%d-%d", round, i),
				[]AcceptTarget{{HostPubkey: relay.PublicKey(), Seq: int64(i + 1), WireHash: WireHash([]byte{byte(i)})}}, at)
			got, err := buf.Result(relay, StatusAccepted, a)
			if err != nil {
				t.Fatal(err)
			}
			want, err := AcceptedResult(relay, StatusAccepted, a)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, statement %d:\n got %+v\nwant %+v", round, i, got, want)
			}
		}
		if round > 0 && buf.Cap() == 0 {
			t.Fatal("no arena kept")
		}
		c := buf.Cap()
		buf.Reset()
		if buf.Cap() != c {
			t.Fatalf("Reset dropped the arena: cap %d, was %d", buf.Cap(), c)
		}
	}
}

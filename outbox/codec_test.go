package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

func randRow(rng *rand.Rand) Row {
	str := func() string {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	tm := func() time.Time {
		if rng.IntN(3) == 0 {
			return time.Time{}
		}
		return time.UnixMilli(rng.Int64N(1<<45) - 1<<44).UTC()
	}
	r := Row{
		ItemID: str(), MsgID: str(), Host: str(), HostKey: str(), Agent: str(), Subject: str(),
		Kind: Kind(1 + rng.IntN(2)), State: State(1 + rng.IntN(6)), Transport: Transport(rng.IntN(3)),
		Attempts: rng.IntN(1 << 20), LANFailures: rng.IntN(100), Repush: rng.IntN(2) == 0,
		CreatedAt: tm(), UpdatedAt: tm(), NextAt: tm(), AcceptedAt: tm(), Deadline: tm(), EndedAt: tm(),
		LastError: str(), Reason: str(), Relay: str(), Epoch: str(), Seq: rng.Int64() - math.MaxInt64/2,
		StatementSig: str(),
	}
	if rng.IntN(2) == 0 {
		r.Statement = []byte(str() + "x")
	}
	return r
}

func TestRowCodecRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		r := randRow(rng)
		got, err := decodeRow(encodeRow(&r))
		if err != nil {
			t.Fatalf("row %d: decode: %v", i, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("row %d round trip:\n got %+v\nwant %+v", i, got, r)
		}
	}
}

func TestRowCodecRefusesDamage(t *testing.T) {
	r := randRow(rand.New(rand.NewPCG(3, 4)))
	good := encodeRow(&r)
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:3]},
		{"version", append([]byte{2}, good[1:]...)},
		{"kind", append([]byte{1, 0}, good[2:]...)},
		{"state", append([]byte{1, 1, 7}, good[3:]...)},
		{"transport", append([]byte{1, 1, 1, 3}, good[4:]...)},
		{"flags", append([]byte{1, 1, 1, 1, 2}, good[5:]...)},
		{"mask", append([]byte{1, 1, 1, 1, 0, 64}, good[6:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(bytes.Clone(good), 0)},
	}
	for _, tt := range tests {
		if _, err := decodeRow(tt.b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", tt.name, err)
		}
	}
}

// FuzzDecodeRow: a damaged store never panics the decoder, and whatever decodes re-encodes to
// the same bytes.
func FuzzDecodeRow(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 8 {
		r := randRow(rng)
		f.Add(encodeRow(&r))
	}
	f.Add([]byte{1, 1, 1, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRow(b)
		if err != nil {
			return
		}
		if again := encodeRow(&r); !bytes.Equal(again, b) {
			// Varints have several encodings; the decoded row must at least be stable.
			r2, err := decodeRow(again)
			if err != nil || !reflect.DeepEqual(r2, r) {
				t.Fatalf("re-encoded row differs: %v", err)
			}
		}
	})
}

// FuzzRowJSON: Row's JSON reader never panics and what it accepts writes back readable.
func FuzzRowJSON(f *testing.F) {
	f.Add([]byte(`{"msg_id":"M","state":"pending","kind":"envelope","next_at":"2026-10-02T10:00:00.000Z"}`))
	f.Add([]byte(`{"state":"nope"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Row
		if err := json.Unmarshal(b, &r); err != nil {
			return
		}
		out, err := json.Marshal(r)
		if err != nil {
			return // a zero kind or state has no name
		}
		var back Row
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-read: %v", err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("JSON round trip:\n got %+v\nwant %+v", back, r)
		}
	})
}

func TestStateNames(t *testing.T) {
	tests := []struct {
		s      State
		name   string
		active bool
	}{
		{StatePending, "pending", true},
		{StateRelayAccepted, "relay-accepted", true},
		{StateExpired, "expired", false},
		{StateUnconfirmed, "unconfirmed", false},
		{StateRejected, "rejected", false},
		{StateDone, "done", false},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.name {
			t.Errorf("String() = %q, want %q", got, tt.name)
		}
		if tt.s.Active() != tt.active || tt.s.Ended() == tt.active {
			t.Errorf("%s: Active %v Ended %v", tt.name, tt.s.Active(), tt.s.Ended())
		}
		got, err := ParseState(tt.name)
		if err != nil || got != tt.s {
			t.Errorf("ParseState(%q) = %v, %v", tt.name, got, err)
		}
	}
	if _, err := ParseState("Pending"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseState(Pending) err = %v", err)
	}
	if _, err := State(0).MarshalText(); !errors.Is(err, ErrInvalid) {
		t.Errorf("State(0).MarshalText err = %v", err)
	}
	if got := State(9).String(); got != "State(9)" {
		t.Errorf("State(9) = %q", got)
	}
	for _, tt := range []struct {
		tr   Transport
		name string
	}{{TransportNone, ""}, {TransportLAN, "lan"}, {TransportRelay, "relay"}} {
		var back Transport
		b, err := tt.tr.MarshalText()
		if err != nil || string(b) != tt.name || back.UnmarshalText(b) != nil || back != tt.tr {
			t.Errorf("transport %q: %q %v → %v", tt.name, b, err, back)
		}
	}
	for _, tt := range []struct {
		k    Kind
		name string
	}{{KindEnvelope, "envelope"}, {KindReceipt, "receipt"}} {
		var back Kind
		b, err := tt.k.MarshalText()
		if err != nil || string(b) != tt.name || back.UnmarshalText(b) != nil || back != tt.k {
			t.Errorf("kind %q: %q %v → %v", tt.name, b, err, back)
		}
	}
	var k Kind
	if err := k.UnmarshalText([]byte("expired")); !errors.Is(err, ErrInvalid) {
		t.Errorf("Kind.UnmarshalText(expired) err = %v", err)
	}
}

package mbx

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestReceiptsEnvelopeRoundTrip: receipt wires go into a sealed receipts envelope and come out of
// the opened body byte for byte; the envelope is recognised only between the hosts it names.
func TestReceiptsEnvelopeRoundTrip(t *testing.T) {
	src := rand.NewChaCha8([32]byte{26})
	hk, _ := GenerateSigningKey(src)
	ek, _ := GenerateEncKey(src)
	now := time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)
	var wires [][]byte
	for seq := int64(1); seq <= 2; seq++ {
		s, err := SignReceipt(hk, "beta", ReceiptInput{Msg: "01JQ0000000000000000000001", Agent: "bob", State: ReceiptDelivered, At: ISOTime(now), Seq: seq})
		if err != nil {
			t.Fatal(err)
		}
		w, err := s.Wire()
		if err != nil {
			t.Fatal(err)
		}
		wires = append(wires, w)
	}
	d, err := ReceiptsDraft("beta", "alpha", wires...)
	if err != nil {
		t.Fatal(err)
	}
	env, err := Build(d, now, NewULIDs(src))
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	sealed, wire, err := env.Seal(src, ek.PublicKey(), "beta", hk)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseEnvelope(wire)
	if err != nil || got.Verify("beta", hk.PublicKey()) != nil {
		t.Fatalf("parse/verify: %v", err)
	}
	if !IsReceiptsEnvelope(got, "beta", "alpha") || IsReceiptsEnvelope(got, "beta", "gamma") || IsReceiptsEnvelope(got, "gamma", "alpha") {
		t.Fatal("recognised between the wrong hosts, or not between the right ones")
	}
	body, err := got.Open(ek)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Receipts(body)
	if err != nil || len(out) != 2 || !bytes.Equal(out[0], wires[0]) || !bytes.Equal(out[1], wires[1]) {
		t.Fatalf("receipts = %q, %v; want the wires back", out, err)
	}
	if _, err := ParseReceipt(out[1]); err != nil {
		t.Fatal(err)
	}
	_ = sealed
	for _, bad := range []string{``, `{}`, `{"receipts":[{}]} {}`, `{"receipts":[{}]}]`, `{"receipts":[]}`, `{"receipts":["x"]}`, `{"receipts":[{}],"more":1}`, `not json`} {
		if _, err := Receipts(bad); !errors.Is(err, ErrReceiptsEnvelope) {
			t.Errorf("Receipts(%q) = %v, want ErrReceiptsEnvelope", bad, err)
		}
	}
	if _, err := ReceiptsDraft("beta", "alpha"); err == nil {
		t.Error("a draft without receipts")
	}
	if _, err := ReceiptsDraft("beta", "alpha", []byte(strings.Repeat(" ", 3))); err == nil {
		t.Error("a draft with a wire that is not an object")
	}
}

// FuzzReceipts: any body Receipts accepts yields JSON objects, and putting them in a draft again
// gives the same wires back.
func FuzzReceipts(f *testing.F) {
	f.Add(`{"receipts":[{"rec":{},"sig":"x"}]}`)
	f.Add(`{"receipts":[{}, {"a":[1,2]}]}`)
	f.Add(`{"receipts":"x"}`)
	f.Fuzz(func(t *testing.T, body string) {
		ws, err := Receipts(body)
		if err != nil {
			return
		}
		d, err := ReceiptsDraft("beta", "alpha", ws...)
		if err != nil {
			if len(body) <= MaxBody {
				t.Fatalf("accepted wires do not make a draft: %v", err)
			}
			return
		}
		again, err := Receipts(d.Body)
		if err != nil || len(again) != len(ws) {
			t.Fatalf("round trip: %v", err)
		}
		for i := range ws {
			if !bytes.Equal(again[i], ws[i]) {
				t.Fatalf("wire %d changed: %q → %q", i, ws[i], again[i])
			}
		}
	})
}

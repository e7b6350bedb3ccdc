package mbx

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestRotationNoticeRoundTrip(t *testing.T) {
	old := mustKey(t, "cpSvM9EeBH4U8xp2w40Err6TZANeiBdqn1TQC4aj9Ks=")
	next := mustKey(t, "SiTtxlUWlf7tSlep4I19isQjmPDRa+D64cVEcsbop1Q=")
	peerEnc, err := GenerateEncKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherEnc, err := GenerateEncKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := SignRotation("alpha", old, next, otherEnc.PublicKey(), time.Date(2026, 3, 24, 9, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	signed, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	id := RotationNoticeID(next.PublicKey(), old.PublicKey())
	wire, err := SealRotationNotice(rand.Reader, id, signed, peerEnc.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(wire, []byte(next.PublicKey())) {
		t.Error("the notice shows the record in clear")
	}
	// What a relay checks of an envelope-kind item: a JSON object, id = item id, enc an object.
	var shape map[string]json.RawMessage
	if err := json.Unmarshal(wire, &shape); err != nil || string(shape["id"]) != `"`+id+`"` || shape["enc"][0] != '{' {
		t.Fatalf("wire %s is not envelope-shaped for the relay", wire)
	}
	got, err := OpenRotationNotice(wire, id, otherEnc, peerEnc)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if _, err := CheckRotation(got, old.PublicKey()); err != nil {
		t.Fatalf("opened record does not check: %v", err)
	}
	t.Run("another item id", func(t *testing.T) {
		if _, err := OpenRotationNotice(wire, "host-rotation:x", peerEnc); !errors.Is(err, ErrBadRotation) {
			t.Errorf("got %v, want a bad rotation", err)
		}
	})
	t.Run("not our key", func(t *testing.T) {
		if _, err := OpenRotationNotice(wire, id, otherEnc); !errors.Is(err, ErrUndecryptable) {
			t.Errorf("got %v, want undecryptable", err)
		}
	})
	t.Run("an envelope is not a notice", func(t *testing.T) {
		if _, err := OpenRotationNotice([]byte(`{"v":3,"id":"x","enc":{}}`), "x", peerEnc); !errors.Is(err, ErrNotRotationNotice) {
			t.Errorf("got %v", err)
		}
	})
}

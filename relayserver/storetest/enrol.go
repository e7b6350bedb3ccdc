package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

func testEnrolmentNamesAndRevocation(t *testing.T, s relayserver.Store) {
	at := time.UnixMilli(1000)
	// Two owners' "macbook" without a proven account coexist.
	for i := range 2 {
		if err := enrol(t, s, relayserver.Enrolment{HostPubkey: Key(i), HostName: "macbook",
			AuthorizedBy: "host-key", EnrolledAt: at.Add(time.Duration(i) * time.Millisecond)}); err != nil {
			t.Fatalf("enrol %d: %v", i, err)
		}
	}
	// Inside one proven account the name is unique, case-insensitively.
	box := relayserver.Enrolment{HostPubkey: Key(10), HostName: "Box", OwnerFP: "fp", Account: "acct", Org: "org",
		AuthorizedBy: "token", AuthorityRank: 10, EnrolledAt: at, AuthUntil: at.Add(15 * time.Minute)}
	if err := enrol(t, s, box); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Enrolment(ctx, Key(10)); err != nil || !sameEnrolment(got, box) {
		t.Fatalf("Enrolment = %+v, %v; want %+v", got, err, box)
	}
	err := enrol(t, s, relayserver.Enrolment{HostPubkey: Key(11), HostName: "box", Account: "acct",
		AuthorizedBy: "token", AuthorityRank: 10, EnrolledAt: at})
	if !errors.Is(err, relayserver.ErrNameTaken) {
		t.Fatalf("same name in the same account = %v, want ErrNameTaken", err)
	}
	if _, err := s.Enrolment(ctx, Key(11)); !errors.Is(err, relayserver.ErrNotFound) {
		t.Fatalf("Enrolment of the refused key = %v, want ErrNotFound", err)
	}
	if err := enrol(t, s, relayserver.Enrolment{HostPubkey: Key(11), HostName: "box", Account: "other",
		AuthorizedBy: "token", AuthorityRank: 10, EnrolledAt: at}); err != nil {
		t.Fatalf("same name in another account: %v", err)
	}
	got, err := s.EnrolmentsByName(ctx, "MACBOOK", 100)
	if err != nil || len(got) != 2 || got[0].HostPubkey != Key(0) || got[1].HostPubkey != Key(1) {
		t.Fatalf("EnrolmentsByName(MACBOOK) = %+v, %v; want keys 0 and 1 in enrolment order", got, err)
	}
	if got, _ := s.EnrolmentsByName(ctx, "macbook", 1); len(got) != 1 {
		t.Fatalf("EnrolmentsByName limit 1 = %d, want 1", len(got))
	}
	// Revoked stays revoked, whatever a later put says.
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: Key(0), NewPubkey: Key(5), HostName: "macbook", At: at})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := enrol(t, s, relayserver.Enrolment{HostPubkey: Key(0), HostName: "macbook",
		AuthorizedBy: "host-key", EnrolledAt: at}); err != nil {
		t.Fatal(err)
	}
	e, err := s.Enrolment(ctx, Key(0))
	if err != nil || e.Live() {
		t.Fatalf("re-put of a revoked key = %+v, %v; want still revoked", e, err)
	}
	// Key 5 took the name at 1000, key 1 at 1001.
	if got, _ := s.EnrolmentsByName(ctx, "macbook", 100); len(got) != 2 || got[0].HostPubkey != Key(5) || got[1].HostPubkey != Key(1) {
		t.Fatalf("EnrolmentsByName after revocation = %+v, want keys 5 and 1 (live only)", got)
	}
	// A revoked name is free inside its account.
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: Key(10), NewPubkey: Key(12), HostName: "other-name", At: at})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := enrol(t, s, relayserver.Enrolment{HostPubkey: Key(13), HostName: "BOX", Account: "acct",
		AuthorizedBy: "token", AuthorityRank: 10, EnrolledAt: at}); err != nil {
		t.Fatalf("a revoked key's name reused in its account: %v", err)
	}
	var live int64
	_ = s.Update(ctx, func(tx relayserver.Tx) error { live, err = tx.LiveEnrolments(); return err })
	if live != 5 {
		t.Fatalf("live enrolments = %d, want 5", live)
	}
	if _, err := s.Enrolment(ctx, Key(99)); !errors.Is(err, relayserver.ErrNotFound) {
		t.Fatalf("Enrolment of an unknown key = %v, want ErrNotFound", err)
	}
}

func testEncAds(t *testing.T, s relayserver.Store) {
	if _, err := s.EncAd(ctx, Key(1)); !errors.Is(err, relayserver.ErrNotFound) {
		t.Fatalf("EncAd of an unknown key = %v, want ErrNotFound", err)
	}
	v1 := relayserver.EncAd{HostPubkey: Key(1), EncPub: "E1", V1Sig: "sig1", At: time.UnixMilli(5).UTC()}
	v2 := relayserver.EncAd{HostPubkey: Key(1), EncPub: "E2", Ad: []byte(`{"v":2}`), AdSig: "sig2", At: time.UnixMilli(6).UTC()}
	for _, ad := range []relayserver.EncAd{v1, v2} {
		if err := s.Update(ctx, func(tx relayserver.Tx) error { return tx.PutEncAd(ad) }); err != nil {
			t.Fatal(err)
		}
		got, err := s.EncAd(ctx, Key(1))
		if err != nil || got.EncPub != ad.EncPub || got.V1Sig != ad.V1Sig || string(got.Ad) != string(ad.Ad) ||
			got.AdSig != ad.AdSig || !got.At.Equal(ad.At) || got.HostPubkey != Key(1) {
			t.Fatalf("EncAd after put = %+v, %v; want %+v", got, err, ad)
		}
		if got.Ad == nil && ad.Ad != nil || ad.Ad == nil && len(got.Ad) != 0 {
			t.Fatalf("EncAd.Ad = %q, want %q", got.Ad, ad.Ad)
		}
	}
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if got, err := tx.EncAd(Key(1)); err != nil || got.EncPub != "E2" {
			return fmt.Errorf("tx.EncAd = %+v, %v; want E2", got, err)
		}
		if _, err := tx.EncAd(Key(2)); !errors.Is(err, relayserver.ErrNotFound) {
			return fmt.Errorf("tx.EncAd of an unknown key = %v, want ErrNotFound", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testSenderListAllowed(t *testing.T, s relayserver.Store) {
	if _, err := s.SenderList(ctx, Key(1)); !errors.Is(err, relayserver.ErrNotFound) {
		t.Fatalf("SenderList before any = %v, want ErrNotFound", err)
	}
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if ok, _ := tx.SenderAllowed(Key(1), Key(2)); !ok {
			t.Errorf("no list: sender refused")
		}
		if _, err := tx.SenderList(Key(1)); !errors.Is(err, relayserver.ErrNotFound) {
			t.Errorf("tx.SenderList before any = %v, want ErrNotFound", err)
		}
		if err := tx.PutSenderList(relayserver.SenderList{TargetPubkey: Key(1), Senders: []string{Key(2)},
			IAT: time.UnixMilli(5), Record: []byte("{}"), Sig: "s"}); err != nil {
			return err
		}
		if ok, _ := tx.SenderAllowed(Key(1), Key(2)); !ok {
			t.Errorf("listed sender refused")
		}
		if ok, _ := tx.SenderAllowed(Key(1), Key(3)); ok {
			t.Errorf("unlisted sender allowed")
		}
		// A newer empty list refuses everyone.
		if err := tx.PutSenderList(relayserver.SenderList{TargetPubkey: Key(1), IAT: time.UnixMilli(6),
			Record: []byte(`{"n":6}`), Sig: "s6"}); err != nil {
			return err
		}
		if ok, _ := tx.SenderAllowed(Key(1), Key(2)); ok {
			t.Errorf("empty list allows a sender")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.SenderList(ctx, Key(1))
	if err != nil || len(l.Senders) != 0 || l.IAT.UnixMilli() != 6 || string(l.Record) != `{"n":6}` || l.Sig != "s6" {
		t.Fatalf("SenderList = %+v, %v", l, err)
	}
}

func testRotate(t *testing.T, s relayserver.Store) {
	old, nw, snd, other := Key(1), Key(2), Key(3), Key(4)
	at := time.UnixMilli(1)
	for _, k := range []string{old, nw, snd, other} {
		if err := enrol(t, s, relayserver.Enrolment{HostPubkey: k, HostName: "h" + k[40:43],
			AuthorizedBy: "host-key", EnrolledAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	o1Seq := Insert(t, s, NewItem(old, snd, "o1", "o1", 100))
	Insert(t, s, NewItem(old, snd, "o2", "o2", 100))
	Insert(t, s, NewItem(old, snd, "both", "b", 100))
	Insert(t, s, NewItem(nw, snd, "n1", "n1", 100))
	Insert(t, s, NewItem(nw, snd, "both", "b", 100))
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if err := tx.PutEncAd(relayserver.EncAd{HostPubkey: old, EncPub: "E", V1Sig: "s", At: at}); err != nil {
			return err
		}
		if err := tx.PutSenderList(relayserver.SenderList{TargetPubkey: old, Senders: []string{snd},
			IAT: at, Record: []byte("{}"), Sig: "s"}); err != nil {
			return err
		}
		return tx.PutSenderList(relayserver.SenderList{TargetPubkey: other, Senders: []string{old},
			IAT: at, Record: []byte("{}"), Sig: "s"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var res relayserver.RotateResult
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		res, err = tx.Rotate(relayserver.Rotation{OldPubkey: old, NewPubkey: nw, HostName: "renamed",
			At: time.UnixMilli(50)})
		return err
	})
	if err != nil || res.MovedItems != 2 {
		t.Fatalf("Rotate = %+v, %v; want 2 moved", res, err)
	}
	p := pullAll(t, s, nw)
	var ids []string
	last := int64(0)
	for _, it := range p.Items {
		ids = append(ids, it.ItemID)
		if it.Seq <= last {
			t.Fatalf("seqs not increasing: %+v", p.Items)
		}
		last = it.Seq
	}
	if fmt.Sprint(ids) != "[n1 both o1 o2]" {
		t.Fatalf("new key's queue = %v, want [n1 both o1 o2]", ids)
	}
	if p.HeadSeq != last || p.Items[2].Target != nw || string(p.Items[2].Wire) != "o1" {
		t.Fatalf("new key's page = %+v, want head %d and o1's bytes under the new key", p, last)
	}
	if p := pullAll(t, s, old); len(p.Items) != 0 {
		t.Fatalf("old key still has %d items", len(p.Items))
	}
	if u := usage(t, s, nw, snd); u.Target.Items != 4 || u.Sender.Items != 4 {
		t.Fatalf("usage of the new key = %+v, want 4 items", u)
	}
	if u := usage(t, s, old, snd); u != (relayserver.Usage{}) {
		t.Fatalf("usage of the old key = %+v, want zero", u)
	}
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		d, err := tx.Dedup(snd, "o1", nw)
		if err != nil || d.Seq != p.Items[2].Seq {
			t.Errorf("dedup of o1 for the new key = %+v, %v; want seq %d", d, err, p.Items[2].Seq)
		}
		// The old key's row stays: a retry still addressed to it is a duplicate, not a refusal.
		if d, err := tx.Dedup(snd, "o1", old); err != nil || d.Seq != o1Seq || d.WireHash != Hash([]byte("o1")) {
			t.Errorf("dedup of o1 for the old key = %+v, %v; want seq %d kept", d, err, o1Seq)
		}
		if ok, _ := tx.SenderAllowed(nw, snd); !ok {
			t.Errorf("the allowlist did not move to the new key")
		}
		if ok, _ := tx.SenderAllowed(nw, other); ok {
			t.Errorf("the moved allowlist lets in an unlisted sender")
		}
		if ok, _ := tx.SenderAllowed(other, nw); !ok {
			t.Errorf("other target's allowlist still names only the old key")
		}
		if ok, _ := tx.SenderAllowed(other, old); ok {
			t.Errorf("other target's allowlist still lets in the old key")
		}
		if _, err := tx.SenderList(old); !errors.Is(err, relayserver.ErrNotFound) {
			t.Errorf("the old key keeps an allowlist: %v", err)
		}
		if _, err := tx.EncAd(old); !errors.Is(err, relayserver.ErrNotFound) {
			t.Errorf("the old key keeps its enc ad: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := s.Enrolment(ctx, old)
	n, _ := s.Enrolment(ctx, nw)
	if e.Live() || !n.Live() || n.HostName != "renamed" || !e.RevokedAt.Equal(time.UnixMilli(50)) {
		t.Fatalf("after rotation old=%+v new=%+v; want old revoked at 50, new live and renamed", e, n)
	}
	// The new key must not be revoked; rotating into the old one fails and changes nothing.
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: nw, NewPubkey: old, At: time.UnixMilli(60)})
		return err
	})
	if !errors.Is(err, relayserver.ErrRevoked) {
		t.Fatalf("rotation into a revoked key = %v, want ErrRevoked", err)
	}
	if n2, _ := s.Enrolment(ctx, nw); !sameEnrolment(n2, n) {
		t.Fatalf("a refused rotation changed the new key: %+v, was %+v", n2, n)
	}
	if p2 := pullAll(t, s, nw); len(p2.Items) != 4 {
		t.Fatalf("a refused rotation changed the queue: %d items", len(p2.Items))
	}
}

// testRotateSenderRows checks the rules of Tx.Rotate that testRotate does not: the account moves
// with the host unless the new key's authority is stronger, the rotated host's own dedup rows as a
// sender follow it, a retried rotation is a no-op, and an unknown old key is refused.
func testRotateSenderRows(t *testing.T, s relayserver.Store) {
	old, nw, peer := Key(1), Key(2), Key(3)
	at := time.UnixMilli(1)
	if err := enrol(t, s, relayserver.Enrolment{HostPubkey: old, HostName: "laptop", OwnerFP: "fp",
		Account: "acme", Org: "o", AuthorizedBy: "sso", AuthorityRank: 5, EnrolledAt: at,
		AuthUntil: time.UnixMilli(900_000)}); err != nil {
		t.Fatal(err)
	}
	sent := Insert(t, s, NewItem(peer, old, "s1", "s1", 100))
	Insert(t, s, NewItem(peer, nw, "dup", "d", 100))
	Insert(t, s, NewItem(peer, old, "dup", "d-old", 100))
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: Key(50), NewPubkey: nw, At: at})
		return err
	})
	if !errors.Is(err, relayserver.ErrNotFound) {
		t.Fatalf("rotation of an unknown key = %v, want ErrNotFound", err)
	}
	rot := relayserver.Rotation{OldPubkey: old, NewPubkey: nw, At: time.UnixMilli(200)}
	for i := range 2 { // the second is a retry
		var res relayserver.RotateResult
		err := s.Update(ctx, func(tx relayserver.Tx) error { res, err = tx.Rotate(rot); return err })
		if err != nil || res.MovedItems != 0 {
			t.Fatalf("rotation %d = %+v, %v; want nothing moved", i, res, err)
		}
	}
	n, err := s.Enrolment(ctx, nw)
	want := relayserver.Enrolment{HostPubkey: nw, HostName: "laptop", OwnerFP: "fp", Account: "acme", Org: "o",
		AuthorizedBy: "sso", AuthorityRank: 5, EnrolledAt: time.UnixMilli(200), AuthUntil: time.UnixMilli(900_000)}
	if err != nil || !sameEnrolment(n, want) {
		t.Fatalf("new key = %+v, %v; want %+v", n, err, want)
	}
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		if d, err := tx.Dedup(nw, "s1", peer); err != nil || d.Seq != sent {
			t.Errorf("the rotated host's sender row = %+v, %v; want it under the new key at seq %d", d, err, sent)
		}
		if d, err := tx.Dedup(nw, "dup", peer); err != nil || d.WireHash != Hash([]byte("d")) {
			t.Errorf("the new key's own sender row = %+v, %v; want it kept", d, err)
		}
		if _, err := tx.Dedup(old, "s1", peer); !errors.Is(err, relayserver.ErrNotFound) {
			t.Errorf("the old key's sender row stayed: %v", err)
		}
		if a, err := tx.AccountUsage("acme"); err != nil || a.Items != 0 {
			t.Errorf("acme's usage = %+v, %v; want 0 (the new key's queue is empty)", a, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A stronger authority on the new key keeps its own account.
	strong := relayserver.Enrolment{HostPubkey: Key(7), HostName: "desk", Account: "corp", AuthorizedBy: "oidc",
		AuthorityRank: 9, EnrolledAt: at}
	if err := enrol(t, s, strong); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: nw, NewPubkey: Key(7), At: time.UnixMilli(300)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.Enrolment(ctx, Key(7)); e.Account != "corp" || e.AuthorityRank != 9 || e.HostName != "laptop" {
		t.Fatalf("rotation into a stronger key = %+v, want account corp, rank 9, name laptop", e)
	}
}

// sameEnrolment compares enrolments field by field, times by instant (a backend may return them
// in another location).
func sameEnrolment(a, b relayserver.Enrolment) bool {
	ta, tb := a, b
	ta.EnrolledAt, ta.RevokedAt, tb.EnrolledAt, tb.RevokedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	ta.AuthUntil, tb.AuthUntil = time.Time{}, time.Time{}
	return ta == tb && a.EnrolledAt.Equal(b.EnrolledAt) && a.RevokedAt.Equal(b.RevokedAt) && a.AuthUntil.Equal(b.AuthUntil)
}

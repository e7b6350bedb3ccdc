package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
)

// testAdmissionMatchesParts checks that Admission reads what Dedup, Enrolment, SenderAllowed,
// Usage and AccountUsage read one by one, over targets in every state.
func testAdmissionMatchesParts(t *testing.T, s relayserver.Store) {
	at := time.UnixMilli(1000)
	snd, other := Key(90), Key(91)
	// 1: plain host with items; 2, 3: hosts of account "acme" with items; 4: revoked member of
	// acme with items (not charged to the account); 5: allowlist without snd; 6: allowlist with
	// snd; 7: never enrolled.
	for i, e := range []relayserver.Enrolment{
		{HostPubkey: Key(1), HostName: "one"},
		{HostPubkey: Key(2), HostName: "two", Account: "acme", Org: "o", AuthorizedBy: "sso", AuthorityRank: 2},
		{HostPubkey: Key(3), HostName: "three", Account: "acme", AuthorizedBy: "sso", AuthorityRank: 2},
		{HostPubkey: Key(4), HostName: "four", Account: "acme", AuthorizedBy: "sso", AuthorityRank: 2, RevokedAt: at},
		{HostPubkey: Key(5), HostName: "five"},
		{HostPubkey: Key(6), HostName: "six"},
	} {
		e.EnrolledAt = at.Add(time.Duration(i) * time.Millisecond)
		if e.AuthorizedBy == "" {
			e.AuthorizedBy = "host-key"
		}
		if err := enrol(t, s, e); err != nil {
			t.Fatal(err)
		}
	}
	for i, tgt := range []string{Key(1), Key(2), Key(2), Key(3), Key(4)} {
		Insert(t, s, NewItem(tgt, snd, fmt.Sprintf("s%d", i), fmt.Sprintf("wire-%d", i), 2000))
		Insert(t, s, NewItem(tgt, other, fmt.Sprintf("o%d", i), fmt.Sprintf("other-wire-%d", i*i), 2000))
	}
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if err := tx.PutSenderList(relayserver.SenderList{TargetPubkey: Key(5), Senders: []string{other}, IAT: at, Record: []byte("{}")}); err != nil {
			return err
		}
		return tx.PutSenderList(relayserver.SenderList{TargetPubkey: Key(6), Senders: []string{other, snd}, IAT: at, Record: []byte("{}")})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		for _, c := range []struct{ sender, id, target string }{
			{snd, "s0", Key(1)}, {snd, "new", Key(1)}, {other, "s0", Key(1)},
			{snd, "s1", Key(2)}, {snd, "new", Key(3)}, {snd, "s4", Key(4)},
			{snd, "new", Key(5)}, {other, "new", Key(5)}, {snd, "new", Key(6)}, {snd, "new", Key(7)},
		} {
			got, err := tx.Admission(c.sender, c.id, c.target)
			if err != nil {
				return err
			}
			want, err := admissionByParts(tx, c.sender, c.id, c.target)
			if err != nil {
				return err
			}
			want.SenderDedup = got.SenderDedup // no part reads it: testDedupCharge checks it
			if got != want {
				t.Errorf("Admission(%s, %s, %s)\n got %+v\nwant %+v", c.sender[40:], c.id, c.target[40:], got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The states above are all there: a duplicate, an account charge, a refusal by allowlist.
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		a, err := tx.Admission(snd, "new", Key(3))
		if err != nil {
			return err
		}
		if a.Account.Items != 6 || !a.Enrolled || a.Duplicate || !a.Allowed || a.Usage.Sender.Items != 1 {
			return fmt.Errorf("admission to acme's three = %+v, want 6 items charged to acme", a)
		}
		if a, _ := tx.Admission(snd, "new", Key(5)); a.Allowed {
			return fmt.Errorf("admission by a sender off five's allowlist = %+v", a)
		}
		if a, _ := tx.Admission(snd, "s1", Key(2)); !a.Duplicate || a.Dedup.Seq == 0 {
			return fmt.Errorf("admission of a stored item = %+v", a)
		}
		if a, _ := tx.Admission(snd, "new", Key(7)); a.Enrolled || !a.Allowed || a.Usage != (relayserver.Usage{}) {
			return fmt.Errorf("admission to an unknown target = %+v, want not enrolled, allowed, empty", a)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Quotas count what is queued: acking two of acme's items frees them in the account too.
	p := pullAll(t, s, Key(2))
	Ack(t, s, Key(2), p.Items[1].Seq)
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		a, err := tx.AccountUsage("acme")
		if err != nil || a.Items != 4 {
			return fmt.Errorf("acme's usage after an ack = %+v, %v; want 4 items", a, err)
		}
		if a, err := tx.AccountUsage("nobody"); err != nil || a != (relayserver.Counts{}) {
			return fmt.Errorf("usage of an unknown account = %+v, %v; want zero", a, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// admissionByParts is Admission computed by the single-purpose reads.
func admissionByParts(tx relayserver.Tx, sender, id, target string) (relayserver.Admission, error) {
	want := relayserver.Admission{Dedup: relayserver.Dedup{Sender: sender, ItemID: id, Target: target}}
	if d, err := tx.Dedup(sender, id, target); err == nil {
		want.Duplicate, want.Dedup = true, d
	} else if !errors.Is(err, relayserver.ErrNotFound) {
		return want, err
	}
	if e, err := tx.Enrolment(target); err == nil {
		want.Enrolled, want.Target = true, e
		if e.Account != "" {
			if want.Account, err = tx.AccountUsage(e.Account); err != nil {
				return want, err
			}
		}
	} else if !errors.Is(err, relayserver.ErrNotFound) {
		return want, err
	}
	var err error
	if want.Allowed, err = tx.SenderAllowed(target, sender); err != nil {
		return want, err
	}
	if want.Usage, err = tx.Usage(target, sender); err != nil {
		return want, err
	}
	return want, nil
}

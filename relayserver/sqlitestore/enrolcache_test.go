package sqlitestore

import (
	"errors"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/storetest"
)

func putEnrolment(t *testing.T, s *Store, e relayserver.Enrolment) {
	t.Helper()
	if err := s.Update(ctx, func(tx relayserver.Tx) error { return tx.PutEnrolment(e) }); err != nil {
		t.Fatal(err)
	}
}

func mustEnrolment(t *testing.T, s *Store, pub string) relayserver.Enrolment {
	t.Helper()
	e, err := s.Enrolment(ctx, pub)
	if err != nil {
		t.Fatalf("Enrolment(%s): %v", pub, err)
	}
	return e
}

// Enrolments are cached for the hop checks, and every write of the enrolments table is seen by
// the next read: a re-enrolment, a revocation, a rotation, and a unit that wrote and then failed.
func TestEnrolmentCacheSeesEveryWrite(t *testing.T) {
	s := openT(t, t.TempDir())
	at := storetest.T0
	putEnrolment(t, s, relayserver.Enrolment{HostPubkey: key(1), HostName: "laptop", AuthorizedBy: "challenge", EnrolledAt: at})
	if e := mustEnrolment(t, s, key(1)); e.HostName != "laptop" || !e.Live() {
		t.Fatalf("enrolment = %+v", e)
	}
	if e := mustEnrolment(t, s, key(1)); e.HostName != "laptop" {
		t.Fatalf("cached enrolment = %+v", e)
	}

	putEnrolment(t, s, relayserver.Enrolment{HostPubkey: key(1), HostName: "renamed", AuthorizedBy: "challenge", EnrolledAt: at})
	if e := mustEnrolment(t, s, key(1)); e.HostName != "renamed" {
		t.Fatalf("after re-enrolment: %+v, want the new name", e)
	}

	// A unit that writes the table and then fails leaves the enrolment as it was.
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if err := tx.PutEnrolment(relayserver.Enrolment{HostPubkey: key(1), HostName: "rolled-back",
			AuthorizedBy: "challenge", EnrolledAt: at}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failing unit: %v", err)
	}
	if e := mustEnrolment(t, s, key(1)); e.HostName != "renamed" {
		t.Fatalf("after a failed unit: %+v", e)
	}

	putEnrolment(t, s, relayserver.Enrolment{HostPubkey: key(1), HostName: "renamed", AuthorizedBy: "challenge",
		EnrolledAt: at, RevokedAt: at.Add(time.Second)})
	if e := mustEnrolment(t, s, key(1)); e.Live() {
		t.Fatalf("after revocation: %+v is live", e)
	}

	putEnrolment(t, s, relayserver.Enrolment{HostPubkey: key(2), HostName: "box", AuthorizedBy: "challenge", EnrolledAt: at})
	if e := mustEnrolment(t, s, key(2)); !e.Live() {
		t.Fatalf("enrolment = %+v", e)
	}
	if err := s.Update(ctx, func(tx relayserver.Tx) error {
		_, err := tx.Rotate(relayserver.Rotation{OldPubkey: key(2), NewPubkey: key(3), HostName: "box", At: at.Add(time.Minute)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if e := mustEnrolment(t, s, key(2)); e.Live() {
		t.Fatalf("rotated-away key %+v is live", e)
	}
	if e := mustEnrolment(t, s, key(3)); !e.Live() || e.HostName != "box" {
		t.Fatalf("rotated-to key: %+v", e)
	}
	if _, err := s.Enrolment(ctx, key(9)); !errors.Is(err, relayserver.ErrNotFound) {
		t.Fatalf("unknown key: %v, want ErrNotFound", err)
	}
}

// A lookup that read before an invalidation does not put its stale read back.
func TestEnrolmentCacheDropsStaleReads(t *testing.T) {
	c := newEnrolCache()
	_, gen, ok := c.get("k")
	if ok {
		t.Fatal("empty cache hit")
	}
	c.invalidate() // a transaction that wrote enrolments committed meanwhile
	c.put("k", relayserver.Enrolment{HostName: "stale"}, gen)
	if _, _, ok := c.get("k"); ok {
		t.Fatal("a read from before the invalidation was kept")
	}
	_, gen, _ = c.get("k")
	c.put("k", relayserver.Enrolment{HostName: "fresh"}, gen)
	if e, _, ok := c.get("k"); !ok || e.HostName != "fresh" {
		t.Fatalf("get = %+v, %v", e, ok)
	}
}

// Admission takes the target's enrolment from the cache, yet sees an enrolment its own
// transaction wrote (a revocation, a new account) and, in the next transaction, one that another
// unit committed; the cache is not filled with the uncommitted row.
func TestAdmissionSeesEnrolmentWritesDespiteTheCache(t *testing.T) {
	s := openT(t, t.TempDir())
	at := storetest.T0
	putEnrolment(t, s, relayserver.Enrolment{HostPubkey: key(1), HostName: "laptop", AuthorizedBy: "challenge", EnrolledAt: at})
	admit := func(tx relayserver.Tx) relayserver.Admission {
		a, err := tx.Admission(key(2), "i", key(1))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	err := s.Update(ctx, func(tx relayserver.Tx) error {
		if a := admit(tx); !a.Enrolled || !a.Target.Live() || a.Target.HostName != "laptop" {
			t.Errorf("admission = %+v, want the live laptop", a.Target)
		}
		if err := tx.PutEnrolment(relayserver.Enrolment{HostPubkey: key(1), HostName: "laptop", Account: "acct",
			AuthorizedBy: "oidc", EnrolledAt: at, RevokedAt: at.Add(time.Second)}); err != nil {
			return err
		}
		if a := admit(tx); a.Target.Live() || a.Target.Account != "acct" {
			t.Errorf("admission after its own unit's write = %+v, want revoked, account acct", a.Target)
		}
		return errors.New("roll back")
	})
	if err == nil {
		t.Fatal("the unit did not fail")
	}
	if e := mustEnrolment(t, s, key(1)); !e.Live() || e.Account != "" {
		t.Fatalf("cached enrolment after the rollback = %+v, want the committed live one", e)
	}
	putEnrolment(t, s, relayserver.Enrolment{HostPubkey: key(1), HostName: "laptop", Account: "acct",
		AuthorizedBy: "oidc", EnrolledAt: at})
	err = s.Update(ctx, func(tx relayserver.Tx) error {
		if a := admit(tx); a.Target.Account != "acct" {
			t.Errorf("admission after a committed re-enrolment = %+v, want account acct", a.Target)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

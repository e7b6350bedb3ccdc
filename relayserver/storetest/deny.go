package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// testDenyList: entries are stored, replaced by kind and value, deleted, and those that ended go
// when the next one is added; DenyRevoke marks exactly the live, not yet denied enrolments an
// entry matches, and a new PutEnrolment clears the mark.
func testDenyList(t *testing.T, s relayserver.Store) {
	at := time.UnixMilli(5000).UTC()
	ds := s.(relayserver.DenyStore)
	put := func(d relayserver.DenyEntry) {
		t.Helper()
		if err := relayserver.AddDeny(ctx, ds, d); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []relayserver.DenyEntry {
		t.Helper()
		l, err := s.DenyList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	short := relayserver.DenyEntry{Kind: relayserver.DenyClient, Value: "cli-old", AddedAt: at, Until: at.Add(time.Minute)}
	fp := relayserver.DenyEntry{Kind: relayserver.DenyHost, Value: mbx.Fingerprint(Key(1)), AddedAt: at, Note: "stolen laptop"}
	put(short)
	put(fp)
	if l := list(); len(l) != 2 || l[1] != fp {
		t.Fatalf("DenyList = %+v, want the two entries", l)
	}
	// Replacing by kind and value; the entry that ended before this one was added goes.
	cli := relayserver.DenyEntry{Kind: relayserver.DenyClient, Value: "cli-7", AddedAt: at.Add(2 * time.Minute),
		Until: at.Add(time.Hour)}
	put(cli)
	again := fp
	again.Note, again.AddedAt = "replaced", at.Add(2*time.Minute)
	put(again)
	if l := list(); len(l) != 2 || !slices.Contains(l, cli) || !slices.Contains(l, again) {
		t.Fatalf("DenyList = %+v, want %+v and %+v", l, cli, again)
	}
	if err := relayserver.RemoveDeny(ctx, ds, relayserver.DenyClient, "nope"); !errors.Is(err, relayserver.ErrNotFound) {
		t.Fatalf("removing a missing entry = %v, want ErrNotFound", err)
	}

	// Enrolments: 1 matches the fingerprint, 2 and 3 the client_id (3 revoked by a rotation
	// already), 4 nothing.
	for i, c := range []string{"", "cli-7", "cli-7", "cli-8"} {
		e := relayserver.Enrolment{HostPubkey: Key(i + 1), HostName: "h", ClientID: c, AuthorizedBy: "token",
			AuthorityRank: 10, EnrolledAt: at}
		if i == 2 {
			e.RevokedAt = at
		}
		if err := enrol(t, s, e); err != nil {
			t.Fatal(err)
		}
	}
	revoke := func(d relayserver.DenyEntry) []string {
		t.Helper()
		var keys []string
		if err := s.Update(ctx, func(tx relayserver.Tx) error {
			var err error
			keys, err = tx.DenyRevoke(d, at.Add(3*time.Minute))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		return keys
	}
	if got := revoke(cli); !slices.Equal(got, []string{Key(2)}) {
		t.Fatalf("DenyRevoke(client) = %v, want [%s]", got, Key(2))
	}
	if got := revoke(again); !slices.Equal(got, []string{Key(1)}) {
		t.Fatalf("DenyRevoke(fingerprint) = %v, want [%s]", got, Key(1))
	}
	if got := revoke(cli); len(got) != 0 {
		t.Fatalf("second DenyRevoke = %v, want none (already denied)", got)
	}
	for i, want := range []bool{true, true, false, false} {
		e, err := s.Enrolment(ctx, Key(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if denied := !e.DeniedAt.IsZero(); denied != want {
			t.Fatalf("key %d denied = %v, want %v (%+v)", i+1, denied, want, e)
		}
		if i == 1 && (e.ClientID != "cli-7" || !e.DeniedAt.Equal(at.Add(3*time.Minute))) {
			t.Fatalf("key 2 = %+v, want client_id and denied_at kept", e)
		}
	}
	// Enrolling again clears the mark.
	if err := enrol(t, s, relayserver.Enrolment{HostPubkey: Key(2), HostName: "h", ClientID: "cli-9",
		AuthorizedBy: "token", AuthorityRank: 10, EnrolledAt: at}); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.Enrolment(ctx, Key(2)); !e.DeniedAt.IsZero() || e.ClientID != "cli-9" {
		t.Fatalf("re-enrolled = %+v, want the mark cleared", e)
	}
	if err := relayserver.RemoveDeny(ctx, ds, relayserver.DenyHost, strings.ToUpper(mbx.Fingerprint(Key(1)))); err != nil {
		t.Fatalf("remove by fingerprint in another form: %v", err)
	}
	if l := list(); len(l) != 1 || l[0] != cli {
		t.Fatalf("DenyList after remove = %+v", l)
	}
}

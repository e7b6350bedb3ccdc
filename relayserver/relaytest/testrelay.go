// Package relaytest runs a real relay (relayserver over a SQLite store in a temporary directory)
// inside the test process, on 127.0.0.1, for the host side's tests, and makes the keys of the
// hosts that use it (HostKeys).
package relaytest

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/sqlitestore"
)

// Relay is a running relay.
type Relay struct {
	URL    string
	Key    mbx.SigningKey
	Store  *sqlitestore.Store
	Server *relayserver.Server
}

// Start runs a relay whose key is made from seed, with opts (Key and Version are filled in; the
// rest is relayserver's defaults unless set). The test's cleanup stops it.
func Start(t testing.TB, seed uint64, opts relayserver.Options) *Relay {
	t.Helper()
	key, err := mbx.GenerateSigningKey(testkit.Rand(seed))
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.Key, opts.Version = key, "test"
	srv, err := relayserver.New(context.Background(), st, opts)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { ts.Close(); st.Close() })
	return &Relay{URL: ts.URL, Key: key, Store: st, Server: srv}
}

// HostKeys makes a host's host key from keyRand and its enc key from encRand.
func HostKeys(t testing.TB, keyRand, encRand io.Reader) (mbx.SigningKey, mbx.EncKey) {
	t.Helper()
	k, err := mbx.GenerateSigningKey(keyRand)
	if err != nil {
		t.Fatal(err)
	}
	e, err := mbx.GenerateEncKey(encRand)
	if err != nil {
		t.Fatal(err)
	}
	return k, e
}

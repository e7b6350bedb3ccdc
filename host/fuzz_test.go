package host

import (
	"context"
	"strings"
	"testing"

	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

// FuzzReceiveEnvelope: any bytes from a paired peer are answered accepted, duplicate or
// rejected:<reason>, never with a panic or a store error, and only an accepted envelope leaves
// anything in the mailbox.
func FuzzReceiveEnvelope(f *testing.F) {
	clock := newClock()
	a := newFuzzHost(f, "alpha", clock)
	b := newFuzzHost(f, "beta", clock)
	pairAll2(f, a, b)
	good := sealedForF(f, a, b)
	f.Add(good)
	f.Add([]byte(`{"v":3}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"v":3,"id":"01KKNTQ2CN9WJ3MR4Q1P12F02T","enc":{}}`))
	f.Fuzz(func(t *testing.T, wire []byte) {
		st, err := b.receiveEnvelope(context.Background(), "alpha", wire, true)
		if err != nil {
			t.Fatalf("store error: %v", err)
		}
		if st != mbx.StatusAccepted && st != mbx.StatusDuplicate && !strings.HasPrefix(st, "rejected:") {
			t.Fatalf("status %q", st)
		}
	})
}

func newFuzzHost(f *testing.F, name string, clock *testkit.Clock) *Host {
	f.Helper()
	dir := f.TempDir()
	if err := Init(dir, InitOptions{Host: name, Rand: testkit.Rand(uint64(len(name)))}); err != nil {
		f.Fatal(err)
	}
	h, err := Open(dir, &Options{Clock: clock.Now, Logger: testLoggerB(), NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { h.Close() })
	return h
}

func pairAll2(f *testing.F, a, b *Host) {
	f.Helper()
	for _, x := range [][2]*Host{{a, b}, {b, a}} {
		if err := x[0].PinPeer(PeerRecord{Host: x[1].Name(), HostPubkey: x[1].Key().PublicKey(), EncPub: x[1].EncKey().PublicKey(), Addr: "127.0.0.1:9"}); err != nil {
			f.Fatal(err)
		}
	}
}

func sealedForF(f *testing.F, from, to *Host) []byte {
	f.Helper()
	env, err := mbx.Build(mbx.Draft{From: "alice@" + from.Name(), To: []string{"bob@" + to.Name()}, Subject: "seed", Body: "seed"}, from.clock(), from.ulids)
	if err != nil {
		f.Fatal(err)
	}
	_, wire, err := env.Seal(from.rand, to.EncKey().PublicKey(), from.Name(), from.Key())
	if err != nil {
		f.Fatal(err)
	}
	return wire
}

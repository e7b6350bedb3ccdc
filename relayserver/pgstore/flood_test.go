package pgstore

import (
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// floodReplica is a relay Server with opt on its own store instance of the shared database.
func floodReplica(t *testing.T, url string, opt relayserver.Options) (string, *Store, *relayserver.Server) {
	t.Helper()
	s, err := Open(ctx, url, &Options{Recheck: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := relayserver.New(ctx, s, opt)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { srv.Shutdown(); ts.Close(); s.Close() })
	return ts.URL, s, srv
}

// pushAckSelf pushes n envelopes from k to itself at base, acks them, and counts the statuses.
func pushAckSelf(t *testing.T, base string, k mbx.SigningKey, tag string, n int) map[string]int {
	items := make([]mbx.PushItem, n)
	for i := range items {
		id := fmt.Sprintf("%s-%03d", tag, i)
		w := []byte(`{"v":3,"id":"` + id + `","body":"c2VhbGVk","enc":{"v":1,"alg":"x25519+xchacha20poly1305","body":"c2VhbGVk"}}`)
		items[i] = mbx.PushItem{Kind: "envelope", ItemID: id, Targets: []mbx.PushTarget{{HostPubkey: k.PublicKey(), WireB64: mbx.B64(w)}}}
	}
	code, body := call(t, base, &k, "POST", "/v2/relay/items", mbx.PushRequest{Items: items})
	if code != 200 {
		t.Errorf("push: %d %s", code, body)
		return nil
	}
	var resp mbx.PushResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Error(err)
		return nil
	}
	out := map[string]int{}
	var through int64
	for _, r := range resp.Results {
		out[r.Status]++
		for _, tg := range r.Targets {
			through = max(through, tg.Seq)
		}
	}
	if through > 0 {
		var info mbx.InfoResponse
		_, b := call(t, base, nil, "GET", "/v2/relay/info", nil)
		_ = json.Unmarshal(b, &info)
		if code, body := call(t, base, &k, "POST", "/v2/relay/ack", mbx.AckRequest{Epoch: info.Epoch, Through: through}); code != 200 {
			t.Errorf("ack: %d %s", code, body)
		}
	}
	return out
}

// Finding 2 on PostgreSQL: 20 keys push to themselves and ack, through two replicas of one
// database, past their cap of dedup rows; each key keeps exactly its cap, the rest is refused
// quota:sender_dedup, and an honest host's push is accepted after the flood (the relay-wide limit,
// which counts the rows, is not reached). Reclaiming a denied key frees its rows.
func TestTombstoneFloodAcrossReplicas(t *testing.T) {
	_, url := openT(t, nil)
	key, err := mbx.GenerateSigningKey(crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	const capRows = 50
	opt := relayserver.Options{Key: key, EnrolCallsPerMinute: -1, PushesPerMinute: -1, NewEnrolmentsPerDay: -1,
		MaxPerClient: 64, MaxSenderDedup: capRows,
		// Room for the capped flood (rows and the wires a replica's bound still counts after the
		// acks), not for an uncapped one (2,400 rows and wires).
		MaxRelayBytes: 20*capRows*(relayserver.DedupRowBytes+200) + 64<<10}
	a, st, _ := floodReplica(t, url, opt)
	b, _, srvB := floodReplica(t, url, opt)
	var flood []mbx.SigningKey
	for i := range 20 {
		k, err := mbx.GenerateSigningKey(crand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		enrolAcross(t, a, b, k, fmt.Sprintf("flood%d", i))
		flood = append(flood, k)
	}
	honest, peer := mustKey(t), mustKey(t)
	enrolAcross(t, a, b, honest, "honest")
	enrolAcross(t, b, a, peer, "peer")

	var wg sync.WaitGroup
	results := make([]map[string]int, len(flood))
	for i, k := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = map[string]int{}
			for j, base := range []string{a, b} {
				for s, n := range pushAckSelf(t, base, k, fmt.Sprintf("f%d-%d", i, j), 60) {
					results[i][s] += n
				}
			}
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r["accepted"] != capRows || r["rejected:"+relayserver.RejectSenderDedup] != 120-capRows {
			t.Errorf("flood key %d: %v, want %d accepted and the rest refused quota:sender_dedup", i, r, capRows)
		}
	}
	rows, err := st.DedupRows(ctx)
	if err != nil || rows != 20*capRows {
		t.Fatalf("dedup rows after the flood = %d, %v; want %d", rows, err, 20*capRows)
	}
	for i, base := range []string{a, b} {
		id := fmt.Sprintf("honest-%d", i)
		w := []byte(`{"v":3,"id":"` + id + `","body":"c2VhbGVk","enc":{"v":1,"alg":"x","body":"c2VhbGVk"}}`)
		code, body := call(t, base, &honest, "POST", "/v2/relay/items", mbx.PushRequest{Items: []mbx.PushItem{{Kind: "envelope", ItemID: id,
			Targets: []mbx.PushTarget{{HostPubkey: peer.PublicKey(), WireB64: mbx.B64(w)}}}}})
		if code != 200 || !strings.Contains(string(body), `"accepted"`) {
			t.Errorf("honest push after the flood = %d %s", code, body)
		}
	}
	// The operator denies one flood key and reclaims its rows; a replica applies it.
	fp := mbx.Fingerprint(flood[0].PublicKey())
	d, err := relayserver.NewDenyEntry(relayserver.DenyHost, fp, time.Now(), 0, "flood")
	if err != nil {
		t.Fatal(err)
	}
	if err := relayserver.AddDeny(ctx, st, d); err != nil {
		t.Fatal(err)
	}
	if _, err := relayserver.RequestReclaim(ctx, st, relayserver.DenyHost, fp, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := srvB.ReloadDeny(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := st.Usage(ctx, 100)
	if err != nil || rep.DedupRows != 19*capRows+2 {
		t.Fatalf("usage after the reclaim = %d dedup rows, %v; want %d", rep.DedupRows, err, 19*capRows+2)
	}
	for _, k := range rep.Keys {
		if k.Pubkey == flood[0].PublicKey() {
			t.Errorf("the reclaimed key still holds %+v", k)
		}
	}
}

func mustKey(t *testing.T) mbx.SigningKey {
	t.Helper()
	k, err := mbx.GenerateSigningKey(crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

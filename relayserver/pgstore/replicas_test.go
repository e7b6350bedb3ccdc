package pgstore

import (
	"bytes"
	crand "crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

// replicaServer is a relay Server on its own store instance of the shared database, on 127.0.0.1.
func replicaServer(t *testing.T, url string, key mbx.SigningKey) (string, *relayserver.Metrics) {
	t.Helper()
	s, err := Open(ctx, url, &Options{Recheck: time.Hour}) // only LISTEN/NOTIFY may wake its pulls
	if err != nil {
		t.Fatal(err)
	}
	met := relayserver.NewMetrics(0)
	srv, err := relayserver.New(ctx, s, relayserver.Options{Key: key, EnrolCallsPerMinute: -1, PushesPerMinute: -1, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { srv.Shutdown(); ts.Close(); s.Close() })
	return ts.URL, met
}

// parked reads the gauge of the pulls a replica has parked now.
func parked(t *testing.T, met *relayserver.Metrics) int {
	t.Helper()
	mfs, err := met.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "agentmbx_relay_long_polls_parked" {
			return int(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	t.Fatal("no agentmbx_relay_long_polls_parked gauge")
	return 0
}

// call sends a request, signed as a hop by k when k is not nil, and returns the status and body.
func call(t *testing.T, base string, k *mbx.SigningKey, method, path string, body any) (int, []byte) {
	t.Helper()
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, base+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if k != nil {
		for h, v := range mbx.SignRelayHop(*k, "h", method, mbx.RelaySignedPath(req.URL), b, time.Now(), true) {
			req.Header[h] = v
		}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return 0, nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// enrolAcross asks replica a for a challenge and enrols at replica b.
func enrolAcross(t *testing.T, a, b string, k mbx.SigningKey, name string) {
	t.Helper()
	code, body := call(t, a, nil, "POST", "/v1/relay/challenge", mbx.ChallengeRequest{Host: name, Pubkey: k.PublicKey()})
	if code != 200 {
		t.Fatalf("challenge: %d %s", code, body)
	}
	var c mbx.ChallengeResponse
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	req, err := mbx.SignEnrolment(k, name, c.Challenge, "")
	if err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, b, nil, "POST", "/v1/relay/enrol", req); code != 200 {
		t.Fatalf("enrol at the other replica: %d %s", code, body)
	}
}

// TestReplicasShareChallengesAndWakePulls: a challenge issued by one replica is answered at
// another, and a pull parked on one replica is woken by a push committed through another.
func TestReplicasShareChallengesAndWakePulls(t *testing.T) {
	_, url := openT(t, nil)
	key, _ := mbx.GenerateSigningKey(crand.Reader)
	a, _ := replicaServer(t, url, key)
	b, bMet := replicaServer(t, url, key)
	target, _ := mbx.GenerateSigningKey(crand.Reader)
	sender, _ := mbx.GenerateSigningKey(crand.Reader)
	enrolAcross(t, a, b, target, "target")
	enrolAcross(t, b, a, sender, "sender")

	got := make(chan mbx.PullResponse, 1)
	go func() {
		code, body := call(t, b, &target, "GET", "/v2/relay/items?after=0&wait=30", nil)
		var p mbx.PullResponse
		if code != 200 || json.Unmarshal(body, &p) != nil {
			t.Errorf("parked pull: %d %s", code, body)
		}
		got <- p
	}()
	// Wait until it is parked (were it not parked yet, it would read the item at once).
	for i := 0; parked(t, bMet) != 1; i++ {
		if i == 3000 {
			t.Fatal("the pull never parked")
		}
		time.Sleep(10 * time.Millisecond)
	}
	id := "01KKNTQ2CN9WJ3MR4Q1P12F02T"
	wire := `{"v":3,"id":"` + id + `","body":"c2VhbGVk","enc":{"v":1,"alg":"x25519+xchacha20poly1305","body":"c2VhbGVk"}}`
	code, body := call(t, a, &sender, "POST", "/v2/relay/items", mbx.PushRequest{Items: []mbx.PushItem{{Kind: "envelope",
		ItemID: id, Targets: []mbx.PushTarget{{HostPubkey: target.PublicKey(), WireB64: mbx.B64([]byte(wire))}}}}})
	if code != 200 || !bytes.Contains(body, []byte(`"accepted"`)) {
		t.Fatalf("push at the other replica: %d %s", code, body)
	}
	// Re-checks are an hour apart: only the notification can answer the pull within its wait.
	p := <-got
	if len(p.Items) != 1 || p.Items[0].ItemID != id {
		t.Fatalf("the parked pull answered %+v, want the item pushed at the other replica", p)
	}
}

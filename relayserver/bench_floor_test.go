package relayserver_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// BenchmarkPushFloor is the load of BenchmarkPushSplit (64 senders, 1 item a push; 4 senders,
// 200 items a push; the same child-process pushers) against a server that does only what no relay
// can skip: net/http, reading the body, checking the hop signature, decoding the items and
// signing one accept statement per item. It stores nothing and answers without waiting for any
// commit. What it costs, next to BenchmarkPushSplit, is how much of the relay's CPU per item is
// its store and its checks, and how far from the crypto floor HTTP and JSON alone already are.
func BenchmarkPushFloor(b *testing.B) {
	for _, c := range []struct{ senders, batch int }{{64, 1}, {4, 200}} {
		b.Run(fmt.Sprintf("batch=%d", c.batch), func(b *testing.B) { benchFloor(b, c.senders, c.batch) })
	}
}

func benchFloor(b *testing.B, senders, batch int) {
	relayKey := keyFor(b, 999)
	keys := map[string]string{} // host name → public key
	job := pusherJob{Pushes: max(b.N/senders, 1), Batch: batch}
	for i := range senders {
		h := newHost(b, fmt.Sprintf("s%d", i), uint64(200+i))
		keys[h.name] = h.pub()
		job.Seeds, job.Names = append(job.Seeds, h.key.Seed()), append(job.Names, h.name)
	}
	for i := range 8 {
		job.Targets = append(job.Targets, newHost(b, fmt.Sprintf("t%d", i), uint64(400+i)).pub())
	}
	ts := httptest.NewServer(floorHandler(relayKey, keys))
	defer ts.Close()
	job.URL = ts.URL

	relayCPU, rep := runChild(b, job)
	items := float64(rep.Items)
	b.ReportMetric(items/rep.Elapsed.Seconds(), "items/s")
	b.ReportMetric(float64(relayCPU.Microseconds())/items, "relay-cpu-µs/item")
	b.ReportMetric(float64(rep.CPU.Microseconds())/items, "pusher-cpu-µs/item")
	b.ReportMetric(float64((relayCPU+rep.CPU).Microseconds())/items, "cpu-µs/item")
	sign, verify := ed25519Micros(b)
	floor := sign/float64(batch) + verify/float64(batch) + sign
	b.ReportMetric(floor, "floor-µs/item")
	b.ReportMetric(float64((relayCPU+rep.CPU).Microseconds())/items/floor, "floor-ratio")
}

// floorHandler answers POST /v2/relay/items as a relay would, minus the store: every item
// accepted with seq 1 under a signed accept statement.
func floorHandler(relayKey mbx.SigningKey, keys map[string]string) http.Handler {
	relayPub := relayKey.PublicKey()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		sender := keys[r.Header.Get(mbx.HeaderHost)]
		if err != nil || sender == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if err := mbx.VerifyRelayHop(sender, r.Header, r.Method, mbx.RelaySignedPath(r.URL), body, time.Now()); err != nil {
			http.Error(w, "bad relay hop", http.StatusUnauthorized)
			return
		}
		var req mbx.PushRequest
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var buf mbx.AcceptBuf
		out := mbx.PushResponse{Results: make([]mbx.PushResult, len(req.Items))}
		now := time.Now()
		for i, it := range req.Items {
			wire, err := base64.StdEncoding.DecodeString(it.Targets[0].WireB64)
			if err != nil {
				http.Error(w, "bad request", http.StatusBadRequest)
				return
			}
			a := mbx.NewAccept(relayPub, "epoch", sender, it.ItemID,
				[]mbx.AcceptTarget{{HostPubkey: it.Targets[0].HostPubkey, Seq: 1, WireHash: mbx.WireHash(wire)}}, now)
			if out.Results[i], err = buf.Result(relayKey, mbx.StatusAccepted, a); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		raw, err := json.Marshal(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
	})
}

// ed25519Micros measures one Ed25519 signature and one verification here, in CPU µs (this
// process's CPU time, which other processes on a busy machine do not inflate as they do wall time).
func ed25519Micros(b *testing.B) (sign, verify float64) {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	msg := make([]byte, 400)
	const n = 2000
	start := cpuTime()
	var sig []byte
	for range n {
		sig = ed25519.Sign(priv, msg)
	}
	mid := cpuTime()
	for range n {
		if !ed25519.Verify(pub, msg, sig) {
			b.Fatal("ed25519 verify failed")
		}
	}
	end := cpuTime()
	return float64((mid - start).Microseconds()) / n, float64((end - mid).Microseconds()) / n
}

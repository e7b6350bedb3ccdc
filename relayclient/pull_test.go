package relayclient

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

func TestPullSignsTheQuery(t *testing.T) {
	f := newFake(t)
	page := mbx.PullResponse{Epoch: "ep 1/x", HeadSeq: 900, LastSeq: 900, Items: []mbx.PullItem{
		{Seq: 900, Kind: "envelope", ItemID: "a", SenderPubkey: keyFor(t, 3).PublicKey(), WireB64: "e30="},
	}}
	f.handle("GET /v2/relay/items", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if f.last().hopErr != nil {
			writeJSON(w, 401, mbx.ErrorResponse{Error: "bad relay hop"})
			return
		}
		writeJSON(w, 200, page)
	})
	c := f.client(t)
	got, err := c.Pull(bg, PullRequest{After: 800, Limit: 50, Epoch: "ep 1/x", Wait: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := f.last()
	if want := "/v2/relay/items?after=800&limit=50&epoch=ep+1%2Fx&wait=2"; r.signedPath != want {
		t.Fatalf("signed path %q, want %q", r.signedPath, want)
	}
	if got.Epoch != page.Epoch || len(got.Items) != 1 || got.Items[0].WireB64 != "e30=" {
		t.Fatalf("page %+v", got)
	}
	// The hop covers the query: the same headers with another cursor do not verify.
	if err := mbx.VerifyRelayHop(f.hostKey.PublicKey(), r.header, "GET", "/v2/relay/items?after=0&limit=50&epoch=ep+1%2Fx&wait=2", nil, t0); err == nil {
		t.Fatal("the hop of after=800 verifies for after=0")
	}
	// Without optional fields only after is sent; a wait over the cap is capped.
	if _, err := c.Pull(bg, PullRequest{}); err != nil {
		t.Fatal(err)
	}
	if want := "/v2/relay/items?after=0"; f.last().signedPath != want {
		t.Fatalf("signed path %q, want %q", f.last().signedPath, want)
	}
	if _, err := c.Pull(bg, PullRequest{Wait: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if want := "/v2/relay/items?after=0&wait=60"; f.last().signedPath != want {
		t.Fatalf("signed path %q, want %q", f.last().signedPath, want)
	}
}

func TestPullEpochChanged(t *testing.T) {
	f := newFake(t)
	f.handle("GET /v2/relay/items", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 409, mbx.ErrorResponse{Error: "epoch is not current", Code: mbx.CodeEpoch, Epoch: "ep-2"})
	})
	_, err := f.client(t).Pull(bg, PullRequest{After: 5, Epoch: "ep-1"})
	var ee *EpochError
	if !errors.Is(err, ErrEpochChanged) || !errors.As(err, &ee) || ee.Epoch != "ep-2" {
		t.Fatalf("err = %v, want an EpochError naming ep-2", err)
	}
	if Retryable(err) {
		t.Fatal("an epoch change is not retryable as is")
	}
}

func TestPullRefusesBrokenPages(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"not JSON", `]`},
		{"no epoch", `{"head_seq":1,"items":[],"last_seq":0,"more":false}`},
		{"negative head", `{"epoch":"e","head_seq":-1,"items":[],"last_seq":0}`},
		{"seq not an integer", `{"epoch":"e","head_seq":1,"items":[{"seq":1.5,"kind":"envelope"}],"last_seq":1}`},
		{"items not a list", `{"epoch":"e","head_seq":1,"items":{},"last_seq":1}`},
		{"item above the head", `{"epoch":"e","head_seq":0,"items":[{"seq":5,"kind":"envelope"}],"last_seq":5}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.handle("GET /v2/relay/items", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				w.WriteHeader(200)
				_, _ = w.Write([]byte(tc.body))
			})
			if _, err := f.client(t).Pull(bg, PullRequest{}); !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
		})
	}
}

func TestAck(t *testing.T) {
	f := newFake(t)
	var got mbx.AckRequest
	f.handle("POST /v2/relay/ack", func(w http.ResponseWriter, _ *http.Request, body []byte) {
		_ = json.Unmarshal(body, &got)
		switch {
		case f.last().hopErr != nil:
			writeJSON(w, 401, mbx.ErrorResponse{Error: "bad relay hop"})
		case got.Epoch != f.epoch:
			writeJSON(w, 409, mbx.ErrorResponse{Error: "stale", Code: mbx.CodeEpoch, Epoch: f.epoch})
		case got.Through > 100:
			head := int64(100)
			writeJSON(w, 400, mbx.ErrorResponse{Error: "ack beyond the head", Code: mbx.CodeBadAck, HeadSeq: &head})
		default:
			writeJSON(w, 200, mbx.AckResponse{AckedThrough: got.Through, Deleted: 2, HeadSeq: 100})
		}
	})
	c := f.client(t)
	res, err := c.Ack(bg, "ep-1", 90)
	if err != nil || res.AckedThrough != 90 || res.Deleted != 2 {
		t.Fatalf("ack = %+v, %v", res, err)
	}
	if got.Epoch != "ep-1" || got.Through != 90 {
		t.Fatalf("ack body %+v", got)
	}
	_, err = c.Ack(bg, "ep-1", 150)
	var se *StatusError
	if !errors.Is(err, ErrRewound) || !errors.As(err, &se) || se.HeadSeq == nil || *se.HeadSeq != 100 {
		t.Fatalf("BAD_ACK: err = %v, want ErrRewound with head 100", err)
	}
	_, err = c.Ack(bg, "ep-0", 50)
	var ee *EpochError
	if !errors.Is(err, ErrEpochChanged) || !errors.As(err, &ee) || ee.Epoch != "ep-1" {
		t.Fatalf("stale epoch: err = %v, want EpochError naming ep-1", err)
	}
	for _, bad := range []struct {
		epoch   string
		through int64
	}{{"", 1}, {"ep-1", -1}} {
		if _, err := c.Ack(bg, bad.epoch, bad.through); !errors.Is(err, ErrInvalid) {
			t.Errorf("Ack(%q, %d): err = %v, want ErrInvalid", bad.epoch, bad.through, err)
		}
	}
}

// TestPullRetryHint: the Retry-After of an empty answer to a long poll (a relay that could not
// hold it) reaches the page; a page with items, or an answer to a pull that did not wait, carries
// none.
func TestPullRetryHint(t *testing.T) {
	f := newFake(t)
	items := []mbx.PullItem{}
	f.handle("GET /v2/relay/items", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Retry-After", "10")
		writeJSON(w, 200, mbx.PullResponse{Epoch: "e", HeadSeq: 1, Items: items})
	})
	c := f.client(t)
	got, err := c.Pull(bg, PullRequest{Wait: 20 * time.Second})
	if err != nil || got.RetryAfter != 10*time.Second {
		t.Fatalf("long poll answered at once = %+v, %v; want RetryAfter 10s", got, err)
	}
	if got, err := c.Pull(bg, PullRequest{}); err != nil || got.RetryAfter != 0 {
		t.Fatalf("pull without wait = %+v, %v; want no hint", got, err)
	}
	items = []mbx.PullItem{{Seq: 1, Kind: "envelope", ItemID: "a", SenderPubkey: keyFor(t, 3).PublicKey(), WireB64: "e30="}}
	if got, err := c.Pull(bg, PullRequest{Wait: 20 * time.Second}); err != nil || got.RetryAfter != 0 {
		t.Fatalf("page with items = %+v, %v; want no hint", got, err)
	}
}

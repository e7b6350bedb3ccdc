package relayclient

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// flaky answers status (with header) to the first n requests and then hands over to next.
func flaky(n int, status int, header map[string]string, next func(http.ResponseWriter, *http.Request, []byte)) (func(http.ResponseWriter, *http.Request, []byte), *atomic.Int32) {
	var calls atomic.Int32
	return func(w http.ResponseWriter, r *http.Request, body []byte) {
		if int(calls.Add(1)) <= n {
			for k, v := range header {
				w.Header().Set(k, v)
			}
			writeJSON(w, status, mbx.ErrorResponse{Error: "not now"})
			return
		}
		next(w, r, body)
	}, &calls
}

func okAck(w http.ResponseWriter, _ *http.Request, _ []byte) {
	writeJSON(w, 200, mbx.AckResponse{AckedThrough: 5, HeadSeq: 9})
}

func TestIdempotentRequestsRetryTransientAnswers(t *testing.T) {
	for _, status := range []int{500, 502, 503, 504} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			f := newFake(t)
			h, calls := flaky(DefaultRetryMax, status, nil, okAck)
			f.handle("POST /v2/relay/ack", h)
			if _, err := f.client(t).Ack(bg, "ep-1", 5); err != nil {
				t.Fatalf("ack after %d × %d: %v", DefaultRetryMax, status, err)
			}
			if got := calls.Load(); got != DefaultRetryMax+1 {
				t.Fatalf("%d attempts, want %d", got, DefaultRetryMax+1)
			}
			for i, s := range f.reqs {
				if s.hopErr != nil {
					t.Errorf("attempt %d: hop does not verify: %v", i+1, s.hopErr)
				}
			}
		})
	}
}

func TestRetriesStopAtRetryMaxWithTheLastAnswer(t *testing.T) {
	f := newFake(t)
	h, calls := flaky(100, 502, nil, okAck)
	f.handle("POST /v2/relay/ack", h)
	_, err := f.client(t).Ack(bg, "ep-1", 5)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 502 {
		t.Fatalf("err = %v, want the relay's last answer, a 502 *StatusError", err)
	}
	if got := calls.Load(); got != DefaultRetryMax+1 {
		t.Fatalf("%d attempts, want %d", got, DefaultRetryMax+1)
	}
}

func TestWhatMustSurfaceIsNotRetried(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header map[string]string
	}{
		{"429 goes to the link pause", 429, map[string]string{"Retry-After": "1"}},
		{"503 with a long Retry-After goes to the link pause", 503, map[string]string{"Retry-After": "30"}},
		{"400", 400, nil},
		{"401", 401, nil},
		{"413", 413, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			h, calls := flaky(1, tc.status, tc.header, okAck)
			f.handle("POST /v2/relay/ack", h)
			_, err := f.client(t).Ack(bg, "ep-1", 5)
			var se *StatusError
			if !errors.As(err, &se) || se.Status != tc.status {
				t.Fatalf("err = %v, want a %d *StatusError", err, tc.status)
			}
			if ra := tc.header["Retry-After"]; ra != "" && se.RetryAfter == 0 {
				t.Errorf("Retry-After %s not passed on", ra)
			}
			if got := calls.Load(); got != 1 {
				t.Fatalf("%d attempts, want 1", got)
			}
		})
	}
}

func TestShortRetryAfterIsWaitedFor(t *testing.T) {
	f := newFake(t)
	var first, second atomic.Int64
	h, calls := flaky(1, 503, map[string]string{"Retry-After": "1"}, okAck)
	f.handle("POST /v2/relay/ack", func(w http.ResponseWriter, r *http.Request, b []byte) {
		if first.Load() == 0 {
			first.Store(time.Now().UnixNano())
		} else {
			second.Store(time.Now().UnixNano())
		}
		h(w, r, b)
	})
	if _, err := f.client(t).Ack(bg, "ep-1", 5); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 {
		t.Fatalf("%d attempts, want 2", calls.Load())
	}
	// A lower bound only (the machine may be slow, never fast): the retry came after the
	// second the relay asked for.
	if gap := time.Duration(second.Load() - first.Load()); gap < time.Second {
		t.Fatalf("retried after %v, before the Retry-After of 1 s", gap)
	}
}

func TestLongPollsAndRotationAreNotRetried(t *testing.T) {
	f := newFake(t)
	pull, pulls := flaky(1, 502, nil, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 200, mbx.PullResponse{Epoch: "ep-1", Items: []mbx.PullItem{}})
	})
	f.handle("GET /v2/relay/items", pull)
	c := f.client(t)
	if _, err := c.Pull(bg, PullRequest{Wait: time.Second}); err == nil {
		t.Fatal("a long poll answered 502 succeeded: it was retried inside the request")
	}
	if pulls.Load() != 1 {
		t.Fatalf("long poll: %d attempts, want 1", pulls.Load())
	}
	// The same pull without a wait is retried.
	if _, err := c.Pull(bg, PullRequest{}); err != nil {
		t.Fatalf("short pull after a 502: %v", err)
	}
	if pulls.Load() != 2 {
		t.Fatalf("short pull: %d attempts in all, want 2", pulls.Load())
	}
}

func TestRetriesFitInTheRequestTimeout(t *testing.T) {
	// A 2 s request timeout and 1.2 s between attempts: a third attempt would start past the
	// deadline (2 × 1.2 s), so the client gives up after the second with its answer, and that
	// second attempt starts with most of a second left (earlier, a 150 ms timeout let a slow
	// first attempt on a loaded machine end in a timeout instead).
	f := newFake(t)
	h, calls := flaky(100, 503, nil, okAck)
	f.handle("POST /v2/relay/ack", h)
	c, err := New(f.pin(), "alpha", f.hostKey, &Options{Clock: func() time.Time { return t0 }, Timeout: 2 * time.Second,
		RetryMax: 50, RetryWait: func(int) time.Duration { return 1200 * time.Millisecond },
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Ack(bg, "ep-1", 5)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 503 {
		t.Fatalf("err = %v, want the last answer (503), not a timeout", err)
	}
	if n := calls.Load(); n > 2 {
		t.Fatalf("%d attempts within a 2 s timeout and 1.2 s waits: the deadline did not bound the retries", n)
	}
}

func TestRetryMaxNegativeMeansNone(t *testing.T) {
	f := newFake(t)
	h, calls := flaky(1, 502, nil, okAck)
	f.handle("POST /v2/relay/ack", h)
	c, err := New(f.pin(), "alpha", f.hostKey, &Options{Clock: func() time.Time { return t0 }, RetryMax: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ack(bg, "ep-1", 5); err == nil || calls.Load() != 1 {
		t.Fatalf("err = %v after %d attempts, want a 502 after 1", err, calls.Load())
	}
}

func TestRetryLogsNoSecrets(t *testing.T) {
	f := newFake(t)
	h, _ := flaky(1, 502, nil, okAck)
	f.handle("POST /v2/relay/ack", h)
	var buf bytes.Buffer
	c, err := New(f.pin(), "alpha", f.hostKey, &Options{Clock: func() time.Time { return t0 },
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ack(bg, "ep-1", 5); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "relay request retried") {
		t.Fatalf("no debug line for the retry: %q", buf.String())
	}
	sig := f.reqs[0].header.Get(mbx.HeaderSig)
	if sig == "" {
		t.Fatal("the fake saw no hop signature")
	}
	for _, secret := range []string{sig, `"through"`, "ep-1"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("the log holds %q: %s", secret, buf.String())
		}
	}
}

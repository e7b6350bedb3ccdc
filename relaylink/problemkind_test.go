package relaylink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
)

func TestProblemKind(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"relay unreachable", fmt.Errorf("enrol: %w", relayclient.ErrTransport), api.RelayTransient},
		{"5xx", &relayclient.StatusError{Op: "enrol", Status: http.StatusServiceUnavailable}, api.RelayTransient},
		{"429", &relayclient.StatusError{Op: "enrol", Status: http.StatusTooManyRequests}, api.RelayTransient},
		{"408", &relayclient.StatusError{Op: "enrol", Status: http.StatusRequestTimeout}, api.RelayTransient},
		{"a broken answer", fmt.Errorf("enrol: %w", relayclient.ErrProtocol), api.RelayTransient},
		{"an unreadable token file", errors.New("account token: open /x: no such file"), api.RelayTransient},
		{"403 denied", &relayclient.StatusError{Op: "enrol", Status: http.StatusForbidden, Message: "enrolment denied"}, api.RelayRefused},
		{"400 bad enrolment", &relayclient.StatusError{Op: "enrol", Status: http.StatusBadRequest}, api.RelayRefused},
		{"409 name taken", fmt.Errorf("enrol: %w", &relayclient.StatusError{Op: "enrol", Status: http.StatusConflict}), api.RelayRefused},
		{"not confirmed", fmt.Errorf("enc-ad: %w", relayclient.ErrRefused), api.RelayRefused},
	}
	for _, tc := range cases {
		if got := ProblemKind(tc.err); got != tc.want {
			t.Errorf("%s: ProblemKind(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}

// The errors a real client returns: a relay that is down, and one that refuses the enrolment.
func TestProblemKindOfRealEnrolFailures(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	url := down.URL
	down.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"error":"enrolment denied: this host key is on the relay's deny list"}`))
	}))
	defer refusing.Close()
	for _, tc := range []struct {
		url, want string
	}{{url, api.RelayTransient}, {refusing.URL, api.RelayRefused}} {
		c := testClient(t, tc.url)
		err := c.Enrol(context.Background(), "", "")
		if err == nil {
			t.Fatalf("enrol at %s succeeded", tc.url)
		}
		if got := ProblemKind(err); got != tc.want {
			t.Errorf("enrol at %s: %v: kind %q, want %q", tc.url, err, got, tc.want)
		}
	}
}

func testClient(t *testing.T, url string) *relayclient.Client {
	t.Helper()
	relayKey, err := mbx.GenerateSigningKey(testkit.Rand(1))
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := mbx.GenerateSigningKey(testkit.Rand(2))
	if err != nil {
		t.Fatal(err)
	}
	c, err := relayclient.New(relayclient.Pin{URL: url, RelayKey: relayKey.PublicKey()}, "alpha", hostKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

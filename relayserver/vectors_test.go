package relayserver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayserver"
)

func vectorFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "mbx", "testdata", "vectors", "agentmbx-0.5", name))
	if err != nil {
		t.Fatalf("vector file: %v", err)
	}
	return b
}

// TestRelayHopVectors replays the relay's verdicts of relay_hop.json through the server: a hop the
// original accepted is authenticated, one it refused is answered 401 or 403.
func TestRelayHopVectors(t *testing.T) {
	t.Parallel()
	var file struct {
		Cases []struct {
			Name     string `json:"name"`
			Op       string `json:"op"`
			Enrolled []struct {
				Host    string `json:"host"`
				Pubkey  string `json:"pubkey"`
				Revoked bool   `json:"revoked"`
			} `json:"enrolled"`
			RequestURL string            `json:"request_url"`
			Method     string            `json:"method"`
			Body       string            `json:"body"`
			Headers    map[string]string `json:"headers"`
			NowMS      int64             `json:"now_ms"`
			Expected   string            `json:"expected"`
			Expect     string            `json:"expect"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(vectorFile(t, "relay_hop.json"), &file); err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, nil)
	enrolled := false
	ran := 0
	for _, c := range file.Cases {
		if c.Op != "verify" || strings.HasPrefix(c.RequestURL, "/v1/relay/messages") {
			continue // the v1 message endpoints are not served
		}
		if !enrolled {
			for _, e := range c.Enrolled {
				en := relayserver.Enrolment{HostPubkey: e.Pubkey, HostName: e.Host, AuthorizedBy: "host-key", EnrolledAt: t0}
				if e.Revoked {
					en.RevokedAt = t0
				}
				if err := r.store.Update(bg, func(tx relayserver.Tx) error { return tx.PutEnrolment(en) }); err != nil {
					t.Fatal(err)
				}
			}
			enrolled = true
		}
		t.Run(c.Name, func(t *testing.T) {
			r.clock.mu.Lock()
			r.clock.t = time.UnixMilli(c.NowMS)
			r.clock.mu.Unlock()
			req, _ := http.NewRequest(c.Method, r.ts.URL+c.RequestURL, strings.NewReader(c.Body))
			for k, v := range c.Headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			refused := resp.StatusCode == 401 || resp.StatusCode == 403
			if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
				// No route serves this method (the "method changed" case): the relay never reaches
				// the hop check, so check the hop as the relay would have, against the caller's key.
				u, _ := url.Parse(c.RequestURL)
				err := mbx.VerifyRelayHop(req.Header.Get(mbx.HeaderKey), req.Header, c.Method, mbx.RelaySignedPath(u), []byte(c.Body), time.UnixMilli(c.NowMS))
				refused = err != nil
			}
			if strings.HasPrefix(c.RequestURL, "/v2/relay/info") {
				// info answers everyone; only a valid hop gets the caller's own block.
				refused = !strings.Contains(string(body), `"you":`)
			}
			if c.Expected == "ok" && refused {
				t.Fatalf("status %d, the original accepted this hop", resp.StatusCode)
			}
			if c.Expect == "invalid" && !refused {
				t.Fatalf("status %d, the original refused this hop", resp.StatusCode)
			}
		})
		ran++
	}
	if ran < 10 {
		t.Fatalf("only %d relay hop vectors ran", ran)
	}
}

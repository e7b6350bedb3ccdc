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

// vectorFile reads a vector file from $MBX_VECTORS_DIR when set (any set that follows the
// vectors README), else from the copy committed beside package mbx.
func vectorFile(t *testing.T, name string) []byte {
	t.Helper()
	dir := os.Getenv("MBX_VECTORS_DIR")
	if dir == "" {
		dir = filepath.Join("..", "mbx", "testdata", "vectors", "agentmbx-0.5")
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
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
	var ran, signCases int
	for _, c := range file.Cases {
		if c.Op != "verify" {
			signCases++ // the host side of a hop; package mbx checks those
			continue
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
			r.clock.Set(time.UnixMilli(c.NowMS))
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
				// the hop check, so check the hop as the relay would have, against the caller's
				// key.
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
	if ran+signCases != len(file.Cases) || ran == 0 {
		t.Fatalf("%d verify cases ran and %d sign cases left to package mbx, the file has %d", ran, signCases, len(file.Cases))
	}
}

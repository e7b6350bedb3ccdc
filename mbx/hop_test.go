package mbx

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLANHopVectors(t *testing.T) {
	type tc struct {
		Name        string            `json:"name"`
		Op          string            `json:"op"`
		Host        string            `json:"host"`
		Seed        string            `json:"seed_b64"`
		Port        int               `json:"port"`
		Method      string            `json:"method"`
		Path        string            `json:"path"`
		TS          string            `json:"ts"`
		Body        string            `json:"body"`
		SignedInput string            `json:"signed_input"`
		Headers     map[string]string `json:"headers"`
		Pinned      map[string]string `json:"pinned"`
		NowMS       int64             `json:"now_ms"`
		Expected    string            `json:"expected"`
		Expect      string            `json:"expect"`
		Error       string            `json:"error"`
	}
	for _, c := range loadCases[tc](t, "lan_hop.json") {
		t.Run(c.Name, func(t *testing.T) {
			switch c.Op {
			case "sign":
				if got := string(LANHopInput(c.Method, c.Path, c.TS, []byte(c.Body))); got != c.SignedInput {
					t.Errorf("input %q, want %q", got, c.SignedInput)
				}
				k, err := SigningKeyFromSeed(c.Seed)
				if err != nil {
					t.Fatal(err)
				}
				now, err := ParseISOTime(c.TS)
				if err != nil {
					t.Fatal(err)
				}
				h := SignLANHop(k, c.Host, c.Port, c.Method, c.Path, []byte(c.Body), now)
				for _, name := range []string{HeaderHost, HeaderTS, HeaderSig, HeaderPort} {
					if h.Get(name) != c.Headers[name] {
						t.Errorf("%s = %q, want %q", name, h.Get(name), c.Headers[name])
					}
				}
			case "verify":
				h := http.Header{}
				for k, v := range c.Headers {
					h.Set(k, v)
				}
				pub, paired := c.Pinned[h.Get(HeaderHost)]
				var err error
				if !paired {
					err = errors.New("host not paired") // the caller's lookup; never reaches the verifier
				} else {
					err = VerifyLANHop(pub, h, c.Method, c.Path, []byte(c.Body), time.UnixMilli(c.NowMS))
				}
				checkVerdict(t, err, c.Expected == "ok", c.Error)
				if c.Error == ErrStaleHop.Error() && !errors.Is(err, ErrStaleHop) {
					t.Errorf("err = %v, want ErrStaleHop", err)
				}
				if paired && err != nil && !errors.Is(err, ErrBadHop) {
					t.Errorf("err = %v does not wrap ErrBadHop", err)
				}
			default:
				t.Fatalf("unknown op %q", c.Op)
			}
		})
	}
}

func checkVerdict(t *testing.T, err error, wantOK bool, wantErr string) {
	t.Helper()
	if wantOK && err != nil {
		t.Fatalf("refused: %v", err)
	}
	if !wantOK && err == nil {
		t.Fatalf("accepted; the original refused it (%s)", wantErr)
	}
}

func TestRelayHopVectors(t *testing.T) {
	type enrolled struct {
		Host    string `json:"host"`
		Pubkey  string `json:"pubkey"`
		Revoked bool   `json:"revoked"`
	}
	type tc struct {
		Name            string            `json:"name"`
		Op              string            `json:"op"`
		Flavor          string            `json:"flavor"`
		Host            string            `json:"host"`
		Seed            string            `json:"seed_b64"`
		Method          string            `json:"method"`
		Path            string            `json:"path"`
		TS              string            `json:"ts"`
		Body            string            `json:"body"`
		SignedPath      string            `json:"signed_path"`
		SignedInput     string            `json:"signed_input"`
		Headers         map[string]string `json:"headers"`
		Enrolled        []enrolled        `json:"enrolled"`
		RequestURL      string            `json:"request_url"`
		RelaySignedPath string            `json:"relay_signed_path"`
		NowMS           int64             `json:"now_ms"`
		Expected        string            `json:"expected"`
		Authenticated   *enrolled         `json:"authenticated"`
	}
	for _, c := range loadCases[tc](t, "relay_hop.json") {
		t.Run(c.Name, func(t *testing.T) {
			switch c.Op {
			case "sign":
				u, err := url.Parse(c.Path)
				if err != nil {
					t.Fatal(err)
				}
				path := RelaySignedPath(u)
				if c.Flavor == "v1 (relay-client.js hop)" {
					path = u.EscapedPath() // v1 clients sign the pathname even for a query
				}
				if path != c.SignedPath {
					t.Fatalf("signed path %q, want %q", path, c.SignedPath)
				}
				if got := string(RelayHopInput(c.Method, path, c.TS, []byte(c.Body))); got != c.SignedInput {
					t.Errorf("input %q\nwant  %q", got, c.SignedInput)
				}
				k, err := SigningKeyFromSeed(c.Seed)
				if err != nil {
					t.Fatal(err)
				}
				tsms, err := strconv.ParseInt(c.TS, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				_, withKey := c.Headers[HeaderKey]
				h := SignRelayHop(k, c.Host, c.Method, path, []byte(c.Body), time.UnixMilli(tsms), withKey)
				for _, name := range []string{HeaderHost, HeaderKey, HeaderTS, HeaderSig} {
					if h.Get(name) != c.Headers[name] {
						t.Errorf("%s = %q, want %q", name, h.Get(name), c.Headers[name])
					}
				}
			case "verify":
				u, err := url.Parse(c.RequestURL)
				if err != nil {
					t.Fatal(err)
				}
				if got := RelaySignedPath(u); got != c.RelaySignedPath {
					t.Fatalf("relay signed path %q, want %q", got, c.RelaySignedPath)
				}
				h := http.Header{}
				for k, v := range c.Headers {
					h.Set(k, v)
				}
				// The relay's lookup: by key when x-mbx-key is sent, else by name; live rows only.
				var who *enrolled
				for i, e := range c.Enrolled {
					if e.Revoked {
						continue
					}
					if key := h.Get(HeaderKey); key != "" && e.Pubkey == key || key == "" && e.Host == h.Get(HeaderHost) {
						who = &c.Enrolled[i]
					}
				}
				err = errors.New("not enrolled")
				if who != nil {
					err = VerifyRelayHop(who.Pubkey, h, c.Method, RelaySignedPath(u), []byte(c.Body), time.UnixMilli(c.NowMS))
				}
				checkVerdict(t, err, c.Expected == "ok", "invalid")
				if err == nil && (c.Authenticated == nil || c.Authenticated.Pubkey != who.Pubkey) {
					t.Errorf("authenticated %+v, want %+v", who, c.Authenticated)
				}
			default:
				t.Fatalf("unknown op %q", c.Op)
			}
		})
	}
}

func FuzzVerifyRelayHop(f *testing.F) {
	k, _ := SigningKeyFromSeed("cpSvM9EeBH4U8xp2w40Err6TZANeiBdqn1TQC4aj9Ks=")
	now := time.UnixMilli(1773480413589)
	f.Add("POST", "/v2/relay/items", "1773480413589", []byte(`{"items":[]}`), "")
	f.Add("GET", "/v2/relay/items?after=0", "1773480413589", []byte{}, "x")
	f.Fuzz(func(t *testing.T, method, path, ts string, body []byte, sig string) {
		h := http.Header{}
		h.Set(HeaderTS, ts)
		h.Set(HeaderSig, sig)
		_ = VerifyRelayHop(k.PublicKey(), h, method, path, body, now) // must not panic
		// What we sign, we verify; a different body fails.
		signed := SignRelayHop(k, "alpha", method, path, body, now, true)
		if err := VerifyRelayHop(k.PublicKey(), signed, method, path, body, now); err != nil {
			t.Fatalf("own hop refused: %v", err)
		}
		if err := VerifyRelayHop(k.PublicKey(), signed, method, path, append(body, 'x'), now); err == nil {
			t.Fatal("hop with a changed body accepted")
		}
	})
}

func FuzzVerifyLANHop(f *testing.F) {
	k, _ := SigningKeyFromSeed("cpSvM9EeBH4U8xp2w40Err6TZANeiBdqn1TQC4aj9Ks=")
	now := time.UnixMilli(1773480413589)
	f.Add("POST", "/v1/envelopes", "2026-03-14T09:26:53.589Z", []byte(`{}`), "sig")
	f.Fuzz(func(t *testing.T, method, path, ts string, body []byte, sig string) {
		h := http.Header{}
		h.Set(HeaderHost, "alpha")
		h.Set(HeaderTS, ts)
		h.Set(HeaderSig, sig)
		_ = VerifyLANHop(k.PublicKey(), h, method, path, body, now)
		signed := SignLANHop(k, "alpha", 0, method, path, body, now)
		if err := VerifyLANHop(k.PublicKey(), signed, method, path, body, now); err != nil {
			t.Fatalf("own hop refused: %v", err)
		}
	})
}

// VerifyRelayHop writes hop inputs into reused buffers: hops of bodies large and small, one
// after the other, each verify, and each tampered body is refused, whatever was written before.
func TestVerifyRelayHopReusesBuffers(t *testing.T) {
	k, err := GenerateSigningKey(strings.NewReader(strings.Repeat("h", 32)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1773480413589)
	for i, n := range []int{4000, 10, 0, 70000, 300, 300 << 10, 1} {
		body := []byte(strings.Repeat(string(rune('a'+i)), n))
		h := SignRelayHop(k, "laptop", "POST", "/v2/relay/items", body, now, true)
		if err := VerifyRelayHop(k.PublicKey(), h, "POST", "/v2/relay/items", body, now); err != nil {
			t.Fatalf("body of %d bytes: %v", n, err)
		}
		tampered := append(append([]byte{}, body...), 'x')
		if err := VerifyRelayHop(k.PublicKey(), h, "POST", "/v2/relay/items", tampered, now); err == nil {
			t.Fatalf("body of %d bytes: a tampered body verifies", n)
		}
	}
}

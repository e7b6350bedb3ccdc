package pairing

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/internal/testkit"
	"github.com/agentmbx/agentmbx/mbx"
)

// pairRig is an inviter with its LAN server on 127.0.0.1:0 and a joiner, each with its own
// clock. scrypt (mbx.PairTokenKey) takes about a second under -race: tests run in parallel.
type pairRig struct {
	inv, join       *node
	invLog, joinLog *testkit.SyncBuffer
	invClock        *testkit.Clock
	joinClock       *testkit.Clock
	addr            string // the inviter's LAN address
}

func newPairRig(t *testing.T, inviter, joiner string) *pairRig {
	t.Helper()
	r := &pairRig{invClock: testkit.NewClock(t0), joinClock: testkit.NewClock(t0)}
	r.inv, r.invLog = pairTestHost(t, inviter, r.invClock)
	r.join, r.joinLog = pairTestHost(t, joiner, r.joinClock)
	srv := httptest.NewServer(r.inv.mux)
	t.Cleanup(srv.Close)
	r.addr = srv.Listener.Addr().String()
	return r
}

// invite starts a session on the inviter (ttl 0: DefaultTTL) and returns its token.
func (r *pairRig) invite(t *testing.T, ttl time.Duration) string {
	t.Helper()
	token, err := r.inv.StartPairing(context.Background(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// joined starts a session and joins it with the right token: both sides then wait for their
// users' answers. It returns the token.
func (r *pairRig) joined(ctx context.Context, t *testing.T) string {
	t.Helper()
	token := r.invite(t, 0)
	if _, err := r.join.JoinPairing(ctx, r.addr, token); err != nil {
		t.Fatal(err)
	}
	return token
}

// invited is the common start: alpha has invited beta. It returns the test's context, the rig
// and the token.
func invited(t *testing.T) (context.Context, *pairRig, string) {
	t.Helper()
	r := newPairRig(t, "alpha", "beta")
	return pairCtx(t), r, r.invite(t, 0)
}

func pairCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// noPins fails unless neither host pinned anything.
func (r *pairRig) noPins(t *testing.T) {
	t.Helper()
	for _, h := range []*node{r.inv, r.join} {
		ps, err := h.PeerRecords()
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 0 {
			t.Errorf("%s pinned %+v, want nothing", h.Name(), ps)
		}
	}
}

// noSecrets fails if the token or the token key shows in either log.
func (r *pairRig) noSecrets(t *testing.T, token string) {
	t.Helper()
	key, _ := pairSessionKey(r.inv)
	norm, _ := mbx.NormalizePairToken(token)
	for _, lg := range []*testkit.SyncBuffer{r.invLog, r.joinLog} {
		s := lg.String()
		for _, secret := range []string{token, norm, key} {
			if secret != "" && strings.Contains(s, secret) {
				t.Errorf("a pairing secret is in the log:\n%s", s)
			}
		}
	}
}

func pairSessionKey(h *node) (string, bool) {
	p := h.Service
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.s == nil {
		return "", false
	}
	return p.s.key, true
}

// inviterResult is what the inviter's side of a test ends with.
type inviterResult struct {
	code string
	peer api.Peer
	err  error
}

// runInviter waits for the join and answers the code with accept; with afterJoiner it first
// waits until the joiner's confirmation has arrived.
func runInviter(ctx context.Context, h *node, accept, afterJoiner bool) <-chan inviterResult {
	out := make(chan inviterResult, 1)
	go func() {
		st, err := h.WaitPairing(ctx, api.PairWaiting)
		if err != nil || st.State != api.PairCode {
			out <- inviterResult{err: fmt.Errorf("inviter saw %v (%s), %v", st.State, st.Error, err)}
			return
		}
		if afterJoiner {
			if err := waitTheirs(ctx, h); err != nil {
				out <- inviterResult{err: err}
				return
			}
		}
		peer, err := h.ConfirmPairing(ctx, accept)
		out <- inviterResult{code: st.Code, peer: peer, err: err}
	}()
	return out
}

// waitTheirs waits until the other side's confirmation reached h's session.
func waitTheirs(ctx context.Context, h *node) error {
	p := h.Service
	for {
		p.mu.Lock()
		ok := p.s != nil && p.s.theirs != undecided
		ch := p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

var tokenRE = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}$`)

// codeOfTranscript recomputes the pairing code from a join transcript.
func codeOfTranscript(t *testing.T, transcript []byte) string {
	t.Helper()
	var tr struct {
		Proto string            `json:"proto"`
		A     mbx.PairPartyWire `json:"a"`
		B     mbx.PairPartyWire `json:"b"`
	}
	if err := json.Unmarshal(transcript, &tr); err != nil || tr.Proto != mbx.PairProto {
		t.Fatalf("transcript %s: %v", transcript, err)
	}
	a, err := partyOf(tr.A)
	if err != nil {
		t.Fatal(err)
	}
	b, err := partyOf(tr.B)
	if err != nil {
		t.Fatal(err)
	}
	return mbx.PairingCode(a, b)
}

func sessionOf(h *node) pairSession {
	p := h.Service
	p.mu.Lock()
	defer p.mu.Unlock()
	return *p.s
}

func TestPairBothWays(t *testing.T) {
	for _, c := range []struct {
		name             string
		inviter, joiner  string
		inviterConfirms1 bool // the inviter's user answers before the joiner's confirmation arrives
	}{
		{"alpha invites beta, inviter confirms first", "alpha", "beta", true},
		{"beta invites alpha, joiner confirms first", "beta", "alpha", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := pairCtx(t)
			r := newPairRig(t, c.inviter, c.joiner)
			token := r.invite(t, 0)
			if !tokenRE.MatchString(token) {
				t.Errorf("token %q is not XXXX-XXXX-XXXX Crockford", token)
			}
			st, _ := r.inv.PairingStatus(context.Background())
			if st.State != api.PairWaiting || st.Role != api.PairInviter || st.AttemptsLeft != MaxAttempts ||
				st.ExpiresAt != mbx.ISOTime(r.invClock.Now().Add(DefaultTTL)) {
				t.Errorf("inviter status after start = %+v", st)
			}
			inv := runInviter(ctx, r.inv, true, !c.inviterConfirms1)

			// The joiner types the token in lower case with spaces: it is read leniently.
			typed := strings.ToLower(strings.ReplaceAll(token, "-", " "))
			js, err := r.join.JoinPairing(ctx, r.addr, typed)
			if err != nil {
				t.Fatalf("JoinPairing: %v", err)
			}
			if js.State != api.PairCode || js.Role != api.PairJoiner || js.Peer == nil || js.Peer.Host != c.inviter ||
				js.Peer.Fingerprint != r.inv.Key().Fingerprint() || len(js.Code) != 6 {
				t.Fatalf("joiner status after join = %+v", js)
			}
			if c.inviterConfirms1 {
				// Wait until the inviter's user has accepted, then confirm on the joiner.
				if st, err := r.inv.WaitPairing(ctx, api.PairCode); err != nil || st.State != api.PairConfirmed {
					t.Fatalf("inviter after its accept: %+v, %v", st, err)
				}
			}
			peer, err := r.join.ConfirmPairing(ctx, true)
			if err != nil {
				t.Fatalf("joiner ConfirmPairing: %v", err)
			}
			res := <-inv
			if res.err != nil {
				t.Fatalf("inviter: %v", res.err)
			}

			// Both showed the same code, and it is pairingCode of the transcript each side holds.
			if res.code != js.Code {
				t.Errorf("codes differ: inviter %s, joiner %s", res.code, js.Code)
			}
			is, jss := sessionOf(r.inv), sessionOf(r.join)
			if !bytes.Equal(is.transcript, jss.transcript) {
				t.Errorf("transcripts differ:\n%s\n%s", is.transcript, jss.transcript)
			}
			for _, tr := range [][]byte{is.transcript, jss.transcript} {
				if got := codeOfTranscript(t, tr); got != js.Code {
					t.Errorf("pairingCode(transcript) = %s, shown %s", got, js.Code)
				}
			}
			if is.a.HostPubkey != r.inv.Key().PublicKey() || is.b.HostPubkey != r.join.Key().PublicKey() {
				t.Errorf("transcript parties are not inviter=a, joiner=b")
			}

			// Each pinned the other with the host key and the enc key of its signed ad.
			gotJ, err := r.inv.Peer(c.joiner)
			if err != nil {
				t.Fatalf("inviter did not pin the joiner: %v", err)
			}
			if gotJ.HostPubkey != r.join.Key().PublicKey() || gotJ.EncPub != r.join.EncKey().PublicKey() ||
				gotJ.Addr != fmt.Sprintf("127.0.0.1:%d", mbx.DefaultHostPort) {
				t.Errorf("inviter pinned %+v", gotJ)
			}
			gotI, err := r.join.Peer(c.inviter)
			if err != nil {
				t.Fatalf("joiner did not pin the inviter: %v", err)
			}
			if gotI.HostPubkey != r.inv.Key().PublicKey() || gotI.EncPub != r.inv.EncKey().PublicKey() || gotI.Addr != r.addr {
				t.Errorf("joiner pinned %+v (inviter at %s)", gotI, r.addr)
			}
			if peer.Host != c.inviter || res.peer.Host != c.joiner {
				t.Errorf("ConfirmPairing returned %+v / %+v", peer, res.peer)
			}
			for _, h := range []*node{r.inv, r.join} {
				if st, _ := h.PairingStatus(context.Background()); st.State != api.PairDone || st.Err() != nil {
					t.Errorf("%s status = %+v", h.Name(), st)
				}
			}
			// The used token opens nothing any more.
			var hello mbx.PairHello
			if err := r.join.pairCall(ctx, "GET", r.addr, pathPairHello, nil, &hello); !errors.Is(err, api.ErrPairState) {
				t.Errorf("hello after the pairing: %v, want api.ErrPairState", err)
			}
			r.noSecrets(t, token)
		})
	}
}

func TestPairDeclined(t *testing.T) {
	for _, c := range []struct {
		name                    string
		inviterSays, joinerSays bool
	}{
		{"joiner declines", true, false},
		{"inviter declines", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := pairCtx(t)
			r := newPairRig(t, "alpha", "beta")
			// The inviter runs Invite, as a command without a daemon would.
			inv := make(chan inviterResult, 1)
			tokens := make(chan string, 1)
			go func() {
				var res inviterResult
				res.peer, res.err = Invite(ctx, r.inv, 0, func(tok string) { tokens <- tok }, func(code string, peer api.Peer) bool {
					res.code = code
					if peer.Host != "beta" || peer.Fingerprint != r.join.Key().Fingerprint() {
						t.Errorf("inviter shown peer %+v", peer)
					}
					return c.inviterSays
				})
				inv <- res
			}()
			token := <-tokens
			var shown string
			_, err := Join(ctx, r.join, r.addr, token, func(code string, peer api.Peer) bool {
				shown = code
				return c.joinerSays
			})
			if !errors.Is(err, api.ErrPairDeclined) {
				t.Errorf("joiner: err = %v, want api.ErrPairDeclined", err)
			}
			res := <-inv
			if !errors.Is(res.err, api.ErrPairDeclined) {
				t.Errorf("inviter: err = %v, want api.ErrPairDeclined", res.err)
			}
			if res.code != shown {
				t.Errorf("codes differ: %s / %s", res.code, shown)
			}
			r.noPins(t)
			for _, h := range []*node{r.inv, r.join} {
				if st, _ := h.PairingStatus(context.Background()); st.State != api.PairDeclined || !errors.Is(st.Err(), api.ErrPairDeclined) {
					t.Errorf("%s status = %+v", h.Name(), st)
				}
			}
			r.noSecrets(t, token)
		})
	}
}

func TestPairWrongToken(t *testing.T) {
	t.Parallel()
	ctx, r, token := invited(t)
	wrong := "0000-0000-0000"
	if wrong == token {
		wrong = "1111-1111-1111"
	}
	if _, err := r.join.JoinPairing(ctx, r.addr, wrong); !errors.Is(err, api.ErrPairToken) {
		t.Fatalf("JoinPairing(wrong token) err = %v, want api.ErrPairToken", err)
	}
	if _, err := r.join.JoinPairing(ctx, r.addr, "not a token"); !errors.Is(err, api.ErrPairToken) {
		t.Fatalf("JoinPairing(malformed token) err = %v, want api.ErrPairToken", err)
	}
	st, _ := r.inv.PairingStatus(context.Background())
	if st.State != api.PairWaiting || st.AttemptsLeft != MaxAttempts-1 {
		t.Errorf("inviter after a wrong token: %+v, want waiting with %d attempts left", st, MaxAttempts-1)
	}
	if st, _ := r.join.PairingStatus(context.Background()); st.State != api.PairFailed || !errors.Is(st.Err(), api.ErrPairToken) {
		t.Errorf("joiner after a wrong token: %+v", st)
	}
	if _, err := r.inv.ConfirmPairing(ctx, true); !errors.Is(err, api.ErrPairState) {
		t.Errorf("inviter confirming before any join: %v, want api.ErrPairState", err)
	}
	r.noPins(t)
	r.noSecrets(t, token)
}

// fakeJoiner builds join requests by hand, as a replaying or guessing attacker would.
type fakeJoiner struct {
	name string
	key  mbx.SigningKey
	enc  mbx.EncKey
}

func newFakeJoiner(t *testing.T, name string) fakeJoiner {
	k, err := mbx.GenerateSigningKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e, err := mbx.GenerateEncKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return fakeJoiner{name: name, key: k, enc: e}
}

func (f fakeJoiner) request(t *testing.T, hello mbx.PairHello, tokenKey string, now time.Time) mbx.PairJoinRequest {
	t.Helper()
	a, err := helloParty(hello)
	if err != nil {
		t.Fatal(err)
	}
	nonce, _ := newPairNonce(strings.NewReader(strings.Repeat("n", 16)))
	b := mbx.PairParty{Host: f.name, HostPubkey: f.key.PublicKey(), Nonce: nonce}
	addr := "10.0.0.9:7373"
	tr, err := mbx.JoinTranscript(a, b, addr)
	if err != nil {
		t.Fatal(err)
	}
	mac := "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	if tokenKey != "" {
		if mac, err = mbx.PairMAC(tokenKey, mbx.PairMACJoin, tr); err != nil {
			t.Fatal(err)
		}
	}
	ad, sig, err := mbx.SignEncAdV2(f.name, f.key, f.enc.PublicKey(), now, 0)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ad.Publish(sig)
	if err != nil {
		t.Fatal(err)
	}
	return mbx.PairJoinRequest{V: 1, ANonce: a.Nonce, B: mbx.WirePairParty(b, &addr), MACJoin: mac, EncAd: pub}
}

// post sends body (any JSON value, or raw bytes) to the inviter and returns the status and the
// error code of the answer.
func pairPost(t *testing.T, addr, path string, body any) (int, mbx.PairWireError) {
	t.Helper()
	raw, ok := body.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Post("http://"+addr+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var we mbx.PairWireError
	json.NewDecoder(resp.Body).Decode(&we)
	return resp.StatusCode, we
}

func getHello(t *testing.T, addr string) mbx.PairHello {
	t.Helper()
	resp, err := http.Get("http://" + addr + pathPairHello)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var hl mbx.PairHello
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&hl) != nil {
		t.Fatalf("hello: %s", resp.Status)
	}
	return hl
}

func TestPairTokenBurned(t *testing.T) {
	t.Parallel()
	ctx, r, token := invited(t)
	f := newFakeJoiner(t, "mallory")
	hello := getHello(t, r.addr)
	for i := 1; i <= MaxAttempts; i++ {
		status, we := pairPost(t, r.addr, pathPairJoin, f.request(t, hello, "", r.invClock.Now()))
		wantStatus, wantCode := http.StatusForbidden, "bad_token"
		if i == MaxAttempts {
			wantStatus, wantCode = http.StatusGone, "burned"
		}
		if status != wantStatus || we.Code != wantCode {
			t.Fatalf("wrong MAC #%d: %d %+v, want %d %s", i, status, we, wantStatus, wantCode)
		}
		if i < MaxAttempts && (we.AttemptsLeft == nil || *we.AttemptsLeft != MaxAttempts-i) {
			t.Errorf("wrong MAC #%d: attempts_left %v", i, we.AttemptsLeft)
		}
	}
	// The right token is no use now.
	if _, err := r.join.JoinPairing(ctx, r.addr, token); !errors.Is(err, api.ErrPairBurned) {
		t.Errorf("join with the right token after burning: %v, want api.ErrPairBurned", err)
	}
	if st, _ := r.inv.PairingStatus(context.Background()); st.State != api.PairFailed || !errors.Is(st.Err(), api.ErrPairBurned) {
		t.Errorf("inviter status = %+v", st)
	}
	r.noPins(t)
	if !strings.Contains(r.invLog.String(), "token burned") {
		t.Errorf("no log of the burned token")
	}
}

func TestPairExpired(t *testing.T) {
	t.Run("token", func(t *testing.T) {
		t.Parallel()
		ctx := pairCtx(t)
		r := newPairRig(t, "alpha", "beta")
		token := r.invite(t, 2*time.Minute)
		r.invClock.Advance(2*time.Minute + time.Millisecond)
		if _, err := Join(ctx, r.join, r.addr, token, func(string, api.Peer) bool {
			t.Error("confirm asked for an expired token")
			return true
		}); !errors.Is(err, api.ErrPairExpired) {
			t.Errorf("Join after expiry: %v, want api.ErrPairExpired", err)
		}
		if st, _ := r.inv.PairingStatus(context.Background()); st.State != api.PairExpired {
			t.Errorf("inviter status = %+v", st)
		}
		if st, _ := r.join.PairingStatus(context.Background()); st.State != api.PairExpired {
			t.Errorf("joiner status = %+v", st)
		}
		r.noPins(t)
		// An expired session no longer blocks a new one.
		if _, err := r.inv.StartPairing(context.Background(), time.Minute); err != nil {
			t.Errorf("StartPairing after expiry: %v", err)
		}
	})
	t.Run("confirmation window", func(t *testing.T) {
		t.Parallel()
		ctx := pairCtx(t)
		r := newPairRig(t, "alpha", "beta")
		r.joined(ctx, t)
		r.invClock.Advance(ConfirmWindow + time.Second)
		r.joinClock.Advance(ConfirmWindow / 2) // the joiner's window is still open
		if _, err := r.join.ConfirmPairing(ctx, true); !errors.Is(err, api.ErrPairExpired) {
			t.Errorf("joiner confirm after the inviter's window: %v, want api.ErrPairExpired", err)
		}
		if _, err := r.inv.ConfirmPairing(ctx, true); !errors.Is(err, api.ErrPairExpired) {
			t.Errorf("inviter confirm after its window: %v, want api.ErrPairExpired", err)
		}
		r.noPins(t)
	})
}

func TestPairReplayedJoin(t *testing.T) {
	t.Parallel()
	ctx, r, token := invited(t)
	key, err := mbx.PairTokenKey(token)
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeJoiner(t, "mallory")
	join := f.request(t, getHello(t, r.addr), key, r.invClock.Now())
	if status, we := pairPost(t, r.addr, pathPairJoin, join); status != http.StatusOK {
		t.Fatalf("first join: %d %+v", status, we)
	}
	// The same join again: the token has been used.
	if status, we := pairPost(t, r.addr, pathPairJoin, join); status != http.StatusConflict || we.Code != "state" {
		t.Errorf("replayed join: %d %+v, want 409 state", status, we)
	}
	// A forged confirmation (no token key) is refused and counts as a wrong attempt.
	confirm := mbx.PairConfirmRequest{V: 1, ANonce: join.ANonce, BNonce: join.B.Nonce, Accept: true, MAC: "x"}
	if status, we := pairPost(t, r.addr, pathPairConfirm, confirm); status != http.StatusForbidden || we.Code != "bad_token" {
		t.Errorf("forged confirm: %d %+v, want 403 bad_token", status, we)
	}
	if err := r.inv.CancelPairing(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.inv.PairingStatus(context.Background()); st.State != api.PairFailed || !errors.Is(st.Err(), api.ErrPairCancelled) {
		t.Errorf("status after cancel = %+v", st)
	}
	// Replayed into a new session: refused as another session's; with the nonce swapped for
	// the new one, the MAC fails.
	if _, err := r.inv.StartPairing(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if status, we := pairPost(t, r.addr, pathPairJoin, join); status != http.StatusConflict || we.Code != "state" {
		t.Errorf("join replayed into a new session: %d %+v, want 409 state", status, we)
	}
	join.ANonce = getHello(t, r.addr).Nonce
	if status, we := pairPost(t, r.addr, pathPairJoin, join); status != http.StatusForbidden || we.Code != "bad_token" {
		t.Errorf("join replayed with the new nonce: %d %+v, want 403 bad_token", status, we)
	}
	if _, err := r.inv.ConfirmPairing(ctx, true); !errors.Is(err, api.ErrPairState) {
		t.Errorf("confirm with no join in the session: %v, want api.ErrPairState", err)
	}
	r.noPins(t)
}

func TestPairJoinMalformed(t *testing.T) {
	t.Parallel()
	r := newPairRig(t, "alpha", "beta")
	if _, err := r.inv.StartPairing(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	f := newFakeJoiner(t, "mallory")
	hello := getHello(t, r.addr)
	good := f.request(t, hello, "", r.invClock.Now())
	with := func(mod func(*mbx.PairJoinRequest)) mbx.PairJoinRequest {
		j := good
		mod(&j)
		return j
	}
	str := func(s string) *string { return &s }
	for _, c := range []struct {
		name string
		body any
	}{
		{"not json", []byte("join")},
		{"unknown field", []byte(`{"v":1,"token":"x"}`)},
		{"two values", []byte(`{"v":1} {"v":1}`)},
		{"too large", append([]byte(`{"v":1,"a_nonce":"`), bytes.Repeat([]byte("a"), pairMaxBody)...)},
		{"version 2", with(func(j *mbx.PairJoinRequest) { j.V = 2 })},
		{"bad host", with(func(j *mbx.PairJoinRequest) { j.B.Host = "a b" })},
		{"bad key", with(func(j *mbx.PairJoinRequest) { j.B.HostPubkey = "AAAA" })},
		{"bad owner key", with(func(j *mbx.PairJoinRequest) { j.B.OwnerPubkey = str("x") })},
		{"short nonce", with(func(j *mbx.PairJoinRequest) { j.B.Nonce = "abc" })},
		{"no addr", with(func(j *mbx.PairJoinRequest) { j.B.Addr = nil })},
		{"bad addr", with(func(j *mbx.PairJoinRequest) { j.B.Addr = str("10.0.0.1") })},
		{"port 0", with(func(j *mbx.PairJoinRequest) { j.B.Addr = str("10.0.0.1:0") })},
		{"no mac", with(func(j *mbx.PairJoinRequest) { j.MACJoin = "" })},
	} {
		status, we := pairPost(t, r.addr, pathPairJoin, c.body)
		if status != http.StatusBadRequest || we.Code != "bad_request" {
			t.Errorf("%s: %d %+v, want 400 bad_request", c.name, status, we)
		}
	}
	// None of them counted as a guess, nor moved the session.
	if st, _ := r.inv.PairingStatus(context.Background()); st.State != api.PairWaiting || st.AttemptsLeft != MaxAttempts {
		t.Errorf("inviter status = %+v", st)
	}
	if status, we := pairPost(t, r.addr, pathPairConfirm, []byte(`{"v":1,"mac":"x"}`)); status != http.StatusConflict || we.Code != "state" {
		t.Errorf("confirm before a join: %d %+v, want 409 state", status, we)
	}
}

func TestPairBusyAndConflicts(t *testing.T) {
	t.Run("busy", func(t *testing.T) {
		t.Parallel()
		ctx := pairCtx(t)
		r := newPairRig(t, "alpha", "beta")
		for _, ttl := range []time.Duration{-time.Second, MaxTTL + time.Second} {
			if _, err := r.inv.StartPairing(context.Background(), ttl); !errors.Is(err, api.ErrBadRequest) {
				t.Errorf("StartPairing(context.Background(), %s): %v, want api.ErrBadRequest", ttl, err)
			}
		}
		if st, _ := r.inv.PairingStatus(context.Background()); st.State != api.PairNone {
			t.Errorf("status before any session = %+v", st)
		}
		if _, err := r.inv.StartPairing(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := r.inv.StartPairing(context.Background(), 0); !errors.Is(err, api.ErrPairBusy) {
			t.Errorf("second StartPairing: %v, want api.ErrPairBusy", err)
		}
		if _, err := r.inv.JoinPairing(ctx, r.addr, "0000-0000-0000"); !errors.Is(err, api.ErrPairBusy) {
			t.Errorf("JoinPairing while inviting: %v, want api.ErrPairBusy", err)
		}
		if _, err := r.join.JoinPairing(ctx, "127.0.0.1:1", "0000-0000-0000"); err == nil {
			t.Errorf("JoinPairing to a closed port succeeded")
		}
		if st, _ := r.join.PairingStatus(context.Background()); st.State != api.PairFailed {
			t.Errorf("joiner after an unreachable inviter: %+v", st)
		}
	})
	// One side has the other's name pinned with another key: the pairing fails with a conflict,
	// the pinned key stays, and the other side pins nothing.
	for _, c := range []struct {
		name                 string
		pinner               func(*pairRig) *node
		other                func(*pairRig) *node
		pinned               string // the name pinned with another key
		inviterFailsConflict bool   // the inviter's session ends failed with api.ErrPairConflict
	}{
		{"joiner has the inviter's name pinned with another key",
			func(r *pairRig) *node { return r.join }, func(r *pairRig) *node { return r.inv }, "alpha", false},
		{"inviter has the joiner's name pinned with another key",
			func(r *pairRig) *node { return r.inv }, func(r *pairRig) *node { return r.join }, "beta", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := pairCtx(t)
			r := newPairRig(t, "alpha", "beta")
			pinner, other := c.pinner(r), c.other(r)
			f := newFakeJoiner(t, c.pinned)
			if err := pinner.PinPeer(api.Peer{Host: c.pinned, HostPubkey: f.key.PublicKey(), EncPub: f.enc.PublicKey()}); err != nil {
				t.Fatal(err)
			}
			token := r.invite(t, 0)
			if _, err := r.join.JoinPairing(ctx, r.addr, token); !errors.Is(err, api.ErrPairConflict) {
				t.Errorf("JoinPairing: %v, want api.ErrPairConflict", err)
			}
			if c.inviterFailsConflict {
				if st, _ := r.inv.PairingStatus(context.Background()); st.State != api.PairFailed || !errors.Is(st.Err(), api.ErrPairConflict) {
					t.Errorf("inviter status = %+v", st)
				}
			}
			if p, _ := pinner.Peer(c.pinned); p.HostPubkey != f.key.PublicKey() {
				t.Errorf("the pinned key changed")
			}
			if ps, err := other.PeerRecords(); err != nil || len(ps) != 0 {
				t.Errorf("%s pinned %+v", other.Name(), ps)
			}
		})
	}
}

func TestPairJoinerGivesUp(t *testing.T) {
	t.Parallel()
	r := newPairRig(t, "alpha", "beta")
	ctx := pairCtx(t)
	r.joined(ctx, t)
	// The joiner's user accepts, then the command goes away before the inviter answers.
	jctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := r.join.ConfirmPairing(jctx, true)
		done <- err
	}()
	if err := waitTheirs(ctx, r.inv); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, api.ErrPairCancelled) {
		t.Errorf("joiner: %v, want api.ErrPairCancelled", err)
	}
	// The joiner told the inviter: its user's accept now ends in a decline, no pin.
	if _, err := r.inv.ConfirmPairing(ctx, true); !errors.Is(err, api.ErrPairDeclined) {
		t.Errorf("inviter: %v, want api.ErrPairDeclined", err)
	}
	r.noPins(t)
}

func TestPairStateText(t *testing.T) {
	for s := api.PairNone; s <= api.PairFailed; s++ {
		b, _ := s.MarshalText()
		var back api.PairState
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("state %d: %q → %v, %v", s, b, back, err)
		}
		if s.Final() != (s == api.PairDone || s == api.PairDeclined || s == api.PairExpired || s == api.PairFailed) {
			t.Errorf("%s.Final() = %v", s, s.Final())
		}
	}
	var s api.PairState
	if err := s.UnmarshalText([]byte("nope")); err == nil {
		t.Error("unknown state name accepted")
	}
	in := api.PairingState{State: api.PairFailed, Role: api.PairJoiner, Error: api.ErrPairBurned.Error(), Reason: "burned"}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"state":"failed","role":"joiner","error":"pairing token burned after too many wrong attempts","reason":"burned"}`; string(raw) != want {
		t.Errorf("JSON = %s, want %s", raw, want)
	}
	var out api.PairingState
	if err := json.Unmarshal(raw, &out); err != nil || !errors.Is(out.Err(), api.ErrPairBurned) {
		t.Errorf("decoded %+v, Err %v", out, out.Err())
	}
	if err := (api.PairingState{State: api.PairDone}).Err(); err != nil {
		t.Errorf("done state Err = %v", err)
	}
}

func TestPairHelpers(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"192.168.1.20", "192.168.1.20:7373"},
		{"192.168.1.20:7000", "192.168.1.20:7000"},
		{"http://alpha.local:7000/", "alpha.local:7000"},
		{"alpha.local", "alpha.local:7373"},
		{"::1", "[::1]:7373"},
		{"[::1]:80", "[::1]:80"},
		{"", ""},
		{"host:0", ""},
	} {
		got, err := normalizeDialAddr(c.in)
		if got != c.want || (err != nil) != (c.want == "") {
			t.Errorf("normalizeDialAddr(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ adv, remote, want string }{
		{":7373", "10.0.0.5:51234", "10.0.0.5:7373"},
		{"0.0.0.0:7000", "10.0.0.5:51234", "10.0.0.5:7000"},
		{"[::]:7000", "[fe80::2]:51234", "[fe80::2]:7000"},
		{"10.0.0.9:7373", "10.0.0.5:51234", "10.0.0.9:7373"},
		{"", "10.0.0.5:51234", ""},
	} {
		if got := resolvePeerAddr(c.adv, c.remote); got != c.want {
			t.Errorf("resolvePeerAddr(%q, %q) = %q, want %q", c.adv, c.remote, got, c.want)
		}
	}
	key := strings.Repeat("ab", 32)
	tr := []byte(`{"proto":"x"}`)
	macs := map[string]bool{}
	for _, label := range []string{"confirm-a", "confirm-b"} {
		for _, accept := range []bool{true, false} {
			m, err := mbx.PairConfirmMAC(key, label, tr, accept)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := mbx.PairConfirmMAC(key, label, tr, accept)
			if m != again || len(m) != 43 {
				t.Errorf("confirm MAC %s/%v = %q (again %q)", label, accept, m, again)
			}
			macs[m] = true
		}
	}
	if len(macs) != 4 {
		t.Errorf("confirm MACs of different labels or answers collide: %v", macs)
	}
	if _, err := mbx.PairConfirmMAC(key, "join", tr, true); err == nil {
		t.Error("a confirm MAC under the join label")
	}
	if _, err := mbx.PairConfirmMAC("abcd", "confirm-a", tr, true); err == nil {
		t.Error("a confirm MAC under a short key")
	}
	seen := map[string]bool{}
	if _, err := newPairToken(strings.NewReader("short")); err == nil {
		t.Error("newPairToken with too little randomness did not fail")
	}
	for i := 0; i < 50; i++ {
		tok, err := newPairToken(strings.NewReader(fmt.Sprintf("%012d", i)))
		if err != nil || !tokenRE.MatchString(tok) {
			t.Fatalf("token %q, %v", tok, err)
		}
		if n, err := mbx.NormalizePairToken(tok); err != nil || n != strings.ReplaceAll(tok, "-", "") {
			t.Errorf("token %q normalizes to %q, %v", tok, n, err)
		}
		seen[tok] = true
	}
	if len(seen) != 50 {
		t.Errorf("tokens repeat: %d distinct of 50", len(seen))
	}
}

// tamperProxy sits between a joiner and the inviter's LAN server and rewrites what passes, as an
// active attacker on the network would (without the token).
type tamperProxy struct {
	target string
	req    func(path string, body []byte) []byte // nil: pass unchanged
	resp   func(path string, body []byte) []byte
}

func (p *tamperProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if p.req != nil {
		body = p.req(r.URL.Path, body)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+p.target+r.URL.Path, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if p.resp != nil && resp.StatusCode == http.StatusOK {
		answer = p.resp(r.URL.Path, answer)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

// rewrite decodes a JSON object, lets f change it, and encodes it again.
// onPath is a tamperProxy rewrite of the JSON bodies on path (others pass unchanged).
func onPath(t *testing.T, path string, f func(m map[string]any)) func(string, []byte) []byte {
	return func(p string, body []byte) []byte {
		if p != path {
			return body
		}
		return rewrite(t, body, f)
	}
}

func rewrite(t *testing.T, body []byte, f func(m map[string]any)) []byte {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Errorf("tamper: %v", err)
		return body
	}
	f(m)
	out, _ := json.Marshal(m)
	return out
}

func TestPairTampered(t *testing.T) {
	proxied := func(t *testing.T, r *pairRig, p *tamperProxy) string {
		p.target = r.addr
		srv := httptest.NewServer(p)
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	t.Run("joiner's addr or accept MAC changed", func(t *testing.T) {
		t.Parallel()
		ctx, r, token := invited(t)
		via := proxied(t, r, &tamperProxy{req: onPath(t, pathPairJoin, func(m map[string]any) {
			m["b"].(map[string]any)["addr"] = "10.6.6.6:7373"
		})})
		if _, err := r.join.JoinPairing(ctx, via, token); !errors.Is(err, api.ErrPairToken) {
			t.Errorf("join with the addr changed on the way: %v, want api.ErrPairToken", err)
		}
		if st, _ := r.inv.PairingStatus(context.Background()); st.State != api.PairWaiting || st.AttemptsLeft != MaxAttempts-1 {
			t.Errorf("inviter status = %+v", st)
		}
		via = proxied(t, r, &tamperProxy{resp: onPath(t, pathPairJoin, func(m map[string]any) {
			m["mac_accept"] = "J_dHW1dThRzZYTWV13RLvLlnN2UcPwzTA196Vxqo_Z4"
		})})
		if _, err := r.join.JoinPairing(ctx, via, token); !errors.Is(err, api.ErrPairToken) {
			t.Errorf("join with a forged accept MAC: %v, want api.ErrPairToken", err)
		}
		if st, _ := r.join.PairingStatus(context.Background()); st.State != api.PairFailed || st.Code != "" {
			t.Errorf("joiner status = %+v (no code may be shown)", st)
		}
		r.noPins(t)
	})
	t.Run("inviter's enc-key ad swapped", func(t *testing.T) {
		t.Parallel()
		ctx, r, token := invited(t)
		f := newFakeJoiner(t, "alpha")
		ad, sig, _ := mbx.SignEncAdV2("alpha", f.key, f.enc.PublicKey(), r.joinClock.Now(), 0)
		forged, _ := ad.Publish(sig)
		via := proxied(t, r, &tamperProxy{resp: onPath(t, pathPairJoin, func(m map[string]any) { m["enc_ad"] = forged })})
		if _, err := r.join.JoinPairing(ctx, via, token); !errors.Is(err, api.ErrPairProtocol) || !errors.Is(err, mbx.ErrBadEncAd) {
			t.Errorf("join with a swapped enc-key ad: %v, want api.ErrPairProtocol wrapping an enc-ad refusal", err)
		}
		r.noPins(t)
	})
	t.Run("inviter's decline turned into done", func(t *testing.T) {
		t.Parallel()
		ctx, r, token := invited(t)
		via := proxied(t, r, &tamperProxy{resp: onPath(t, pathPairConfirm, func(m map[string]any) {
			m["state"], m["accept"] = "done", true
		})})
		inv := runInviter(ctx, r.inv, false, true)
		if _, err := r.join.JoinPairing(ctx, via, token); err != nil {
			t.Fatal(err)
		}
		if _, err := r.join.ConfirmPairing(ctx, true); !errors.Is(err, api.ErrPairProtocol) {
			t.Errorf("joiner given a forged done: %v, want api.ErrPairProtocol", err)
		}
		if res := <-inv; !errors.Is(res.err, api.ErrPairDeclined) {
			t.Errorf("inviter: %v, want api.ErrPairDeclined", res.err)
		}
		r.noPins(t)
	})
}

func TestInviteCancelled(t *testing.T) {
	t.Parallel()
	r := newPairRig(t, "alpha", "beta")
	ctx, cancel := context.WithCancel(pairCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := Invite(ctx, r.inv, 0, func(string) { cancel() }, func(string, api.Peer) bool {
			t.Error("confirm called without a join")
			return true
		})
		done <- err
	}()
	if err := <-done; !errors.Is(err, api.ErrPairCancelled) {
		t.Errorf("Invite with ctx cancelled: %v, want api.ErrPairCancelled", err)
	}
	if st, _ := r.inv.PairingStatus(context.Background()); st.State != api.PairFailed || !errors.Is(st.Err(), api.ErrPairCancelled) {
		t.Errorf("status = %+v", st)
	}
	if _, err := r.inv.StartPairing(context.Background(), 0); err != nil {
		t.Errorf("StartPairing after a cancelled session: %v", err)
	}
}

func TestJoinCancelled(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(t0)
	b, _ := pairTestHost(t, "beta", clock)
	// An inviter that never answers: the join ends with its ctx, as a cancelled session.
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(stuck.Close)
	ctx, cancel := context.WithCancel(pairCtx(t))
	go func() {
		st, _ := b.WaitPairing(ctx, api.PairNone)
		if st.State == api.PairJoining {
			cancel()
		}
	}()
	if _, err := b.JoinPairing(ctx, stuck.Listener.Addr().String(), "0000-0000-0000"); !errors.Is(err, api.ErrPairCancelled) {
		t.Errorf("JoinPairing with ctx cancelled: %v, want api.ErrPairCancelled", err)
	}
	if st, _ := b.PairingStatus(context.Background()); st.State != api.PairFailed || !errors.Is(st.Err(), api.ErrPairCancelled) {
		t.Errorf("status = %+v", st)
	}
	cancel()
	if ps, _ := b.PeerRecords(); len(ps) != 0 {
		t.Errorf("pinned %+v", ps)
	}
}

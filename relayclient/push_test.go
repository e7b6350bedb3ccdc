package relayclient

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/agentmbx/agentmbx/mbx"
)

// accepting answers a push the way an honest relay would, and lets a test forge the statement of
// each item (mutate) or the whole result list (results).
type accepting struct {
	t       *testing.T
	f       *fake
	signer  mbx.SigningKey // signs the statements (the relay key unless forging)
	status  string         // accepted unless set
	mutate  func(item int, a *mbx.Accept)
	results func([]mbx.PushResult) []mbx.PushResult
}

func (h *accepting) serve(w http.ResponseWriter, _ *http.Request, body []byte) {
	if err := h.f.last().hopErr; err != nil {
		writeJSON(w, 401, mbx.ErrorResponse{Error: "bad relay hop"})
		return
	}
	var req mbx.PushRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, 400, mbx.ErrorResponse{Error: "bad body"})
		return
	}
	var out []mbx.PushResult
	for i, it := range req.Items {
		var ts []mbx.AcceptTarget
		for j, tg := range it.Targets {
			wire, err := mbx.DecodeB64Lenient(tg.WireB64)
			if err != nil {
				h.t.Errorf("wire_b64: %v", err)
			}
			ts = append(ts, mbx.AcceptTarget{HostPubkey: tg.HostPubkey, Seq: int64(1773480414589 + 10*i + j), WireHash: mbx.WireHash(wire)})
		}
		a := mbx.NewAccept(h.f.relayKey.PublicKey(), h.f.epoch, h.f.hostKey.PublicKey(), it.ItemID, ts, t0)
		if h.mutate != nil {
			h.mutate(i, &a)
		}
		status := mbx.StatusAccepted
		if h.status != "" {
			status = h.status
		}
		r, err := mbx.AcceptedResult(h.signer, status, a)
		if err != nil {
			h.t.Fatal(err)
		}
		out = append(out, r)
	}
	if h.results != nil {
		out = h.results(out)
	}
	writeJSON(w, 200, mbx.PushResponse{Results: out})
}

func TestPushVerdicts(t *testing.T) {
	beta, gamma := keyFor(t, 20).PublicKey(), keyFor(t, 21).PublicKey()
	items := func() []PushItem {
		return []PushItem{
			{Kind: mbx.ItemKindEnvelope, ItemID: "01KKNTQ2CN9WJ3MR4Q1P12F02T", Targets: []PushTarget{{HostPubkey: beta, Wire: []byte(`{"v":3,"to":"beta"}`)}}},
			{Kind: mbx.ItemKindEnvelope, ItemID: "01KKNTQ69NA67N0QBPXKXFN5DP", Targets: []PushTarget{
				{HostPubkey: beta, Wire: []byte(`{"v":3,"n":2,"to":"beta"}`)},
				{HostPubkey: gamma, Wire: []byte(`{"v":3,"n":2,"to":"gamma"}`)},
			}},
		}
	}
	type want struct {
		verdict Verdict
		err     error // wrapped by TargetResult.Err
	}
	acc := want{VerdictAccepted, nil}
	tests := []struct {
		name string
		h    func(f *fake) *accepting
		want [][]want
	}{
		{"all accepted", func(f *fake) *accepting { return &accepting{signer: f.relayKey} },
			[][]want{{acc}, {acc, acc}}},
		{"duplicates", func(f *fake) *accepting { return &accepting{signer: f.relayKey, status: mbx.StatusDuplicate} },
			[][]want{{{VerdictDuplicate, nil}}, {{VerdictDuplicate, nil}, {VerdictDuplicate, nil}}}},
		{"forged: signed by another key", func(f *fake) *accepting { return &accepting{signer: keyFor(t, 66)} },
			[][]want{{{VerdictUnverified, mbx.ErrAcceptSignature}}, {{VerdictUnverified, mbx.ErrAcceptSignature}, {VerdictUnverified, mbx.ErrAcceptSignature}}}},
		{"forged: wire hash of other bytes", func(f *fake) *accepting {
			return &accepting{signer: f.relayKey, mutate: func(i int, a *mbx.Accept) {
				if i == 1 {
					a.Targets[1].WireHash = mbx.WireHash([]byte("other bytes"))
				}
			}}
		}, [][]want{{acc}, {acc, {VerdictUnverified, mbx.ErrAcceptWireHash}}}},
		{"forged: statement for another target", func(f *fake) *accepting {
			return &accepting{signer: f.relayKey, mutate: func(i int, a *mbx.Accept) {
				if i == 0 {
					a.Targets[0].HostPubkey = gamma
				}
			}}
		}, [][]want{{{VerdictUnverified, mbx.ErrAcceptTarget}}, {acc, acc}}},
		{"forged: statement for another sender", func(f *fake) *accepting {
			return &accepting{signer: f.relayKey, mutate: func(i int, a *mbx.Accept) { a.SenderPubkey = gamma }}
		}, [][]want{{{VerdictUnverified, mbx.ErrAcceptSender}}, {{VerdictUnverified, mbx.ErrAcceptSender}, {VerdictUnverified, mbx.ErrAcceptSender}}}},
		{"forged: statement for another item", func(f *fake) *accepting {
			return &accepting{signer: f.relayKey, mutate: func(i int, a *mbx.Accept) {
				if i == 0 {
					a.ItemID = "01KKNTQ3BX9H38ZP1JYH3352SZ"
				}
			}, results: func(rs []mbx.PushResult) []mbx.PushResult {
				rs[0].ItemID = "01KKNTQ2CN9WJ3MR4Q1P12F02T" // the result names our item, the statement another
				return rs
			}}
		}, [][]want{{{VerdictUnverified, mbx.ErrAcceptItem}}, {acc, acc}}},
		{"result and statement for another item", func(f *fake) *accepting {
			return &accepting{signer: f.relayKey, mutate: func(i int, a *mbx.Accept) {
				if i == 0 {
					a.ItemID = "01KKNTQ3BX9H38ZP1JYH3352SZ"
				}
			}}
		}, [][]want{{{VerdictMissing, ErrNoResult}}, {acc, acc}}},
		{"200 with a rejected result", func(f *fake) *accepting {
			return &accepting{signer: f.relayKey, results: func(rs []mbx.PushResult) []mbx.PushResult {
				rs[1] = mbx.RejectedResult(rs[1].ItemID, "quota:items")
				return rs
			}}
		}, [][]want{{acc}, {{VerdictRejected, ErrRefused}, {VerdictRejected, ErrRefused}}}},
		{"rejected status beside a valid statement", func(f *fake) *accepting {
			return &accepting{signer: f.relayKey, status: "rejected:rate"}
		}, [][]want{{{VerdictRejected, ErrRefused}}, {{VerdictRejected, ErrRefused}, {VerdictRejected, ErrRefused}}}},
		{"missing result", func(f *fake) *accepting {
			return &accepting{signer: f.relayKey, results: func(rs []mbx.PushResult) []mbx.PushResult { return rs[1:] }}
		}, [][]want{{{VerdictMissing, ErrNoResult}}, {acc, acc}}},
		{"results out of order", func(f *fake) *accepting {
			return &accepting{signer: f.relayKey, results: func(rs []mbx.PushResult) []mbx.PushResult {
				return []mbx.PushResult{rs[1], rs[0]}
			}}
		}, [][]want{{acc}, {acc, acc}}},
		{"accepted without a statement", func(f *fake) *accepting {
			return &accepting{signer: f.relayKey, results: func(rs []mbx.PushResult) []mbx.PushResult {
				rs[0].Accept, rs[0].Sig = nil, ""
				return rs
			}}
		}, [][]want{{{VerdictUnverified, mbx.ErrAcceptStatus}}, {acc, acc}}},
		{"unknown status", func(f *fake) *accepting { return &accepting{signer: f.relayKey, status: "stored"} },
			[][]want{{{VerdictUnverified, mbx.ErrAcceptStatus}}, {{VerdictUnverified, mbx.ErrAcceptStatus}, {VerdictUnverified, mbx.ErrAcceptStatus}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			h := tc.h(f)
			h.t, h.f = t, f
			f.handle("POST /v2/relay/items", h.serve)
			c := f.client(t)
			in := items()
			res, err := c.Push(bg, in)
			if err != nil {
				t.Fatal(err)
			}
			if f.last().hopErr != nil {
				t.Fatalf("push hop: %v", f.last().hopErr)
			}
			if len(res) != len(in) {
				t.Fatalf("%d results for %d items", len(res), len(in))
			}
			for i := range res {
				if res[i].ItemID != in[i].ItemID || len(res[i].Targets) != len(tc.want[i]) {
					t.Fatalf("item %d: %+v", i, res[i])
				}
				for j, tr := range res[i].Targets {
					w := tc.want[i][j]
					if tr.Verdict != w.verdict || tr.HostPubkey != in[i].Targets[j].HostPubkey {
						t.Errorf("item %d target %d: verdict %v (%v), want %v", i, j, tr.Verdict, tr.Err, w.verdict)
					}
					if w.err != nil && !errors.Is(tr.Err, w.err) {
						t.Errorf("item %d target %d: err %v, want %v", i, j, tr.Err, w.err)
					}
					if tr.Accepted() != (w.verdict == VerdictAccepted || w.verdict == VerdictDuplicate) {
						t.Errorf("item %d target %d: Accepted() = %v for %v", i, j, tr.Accepted(), tr.Verdict)
					}
					if tr.Accepted() {
						if tr.Err != nil || tr.Seq <= 0 || tr.Epoch != f.epoch || !tr.At.Equal(t0) || tr.Sig == "" {
							t.Errorf("item %d target %d: accepted with seq %d epoch %q at %v err %v", i, j, tr.Seq, tr.Epoch, tr.At, tr.Err)
						}
						if !mbx.Verify(f.relayKey.PublicKey(), tr.Statement, tr.Sig) {
							t.Errorf("item %d target %d: the stored statement does not verify with its signature", i, j)
						}
					}
				}
			}
		})
	}
}

func TestPushStatementByAnotherRelayKeyStops(t *testing.T) {
	f := newFake(t)
	newRelay := keyFor(t, 77)
	h := &accepting{t: t, f: f, signer: newRelay, mutate: func(_ int, a *mbx.Accept) { a.RelayPubkey = newRelay.PublicKey() }}
	f.handle("POST /v2/relay/items", h.serve)
	c := f.client(t)
	_, err := c.Push(bg, []PushItem{{Kind: mbx.ItemKindEnvelope, ItemID: "a", Targets: []PushTarget{{HostPubkey: keyFor(t, 20).PublicKey(), Wire: []byte("w")}}}})
	if !errors.Is(err, ErrRelayKeyChanged) || c.Stopped() == nil {
		t.Fatalf("err = %v, want ErrRelayKeyChanged and a stopped client", err)
	}
}

func TestPushWholeRequestFailures(t *testing.T) {
	target := keyFor(t, 20).PublicKey()
	one := []PushItem{{Kind: mbx.ItemKindEnvelope, ItemID: "a", Targets: []PushTarget{{HostPubkey: target, Wire: []byte("w")}}}}
	tests := []struct {
		name    string
		serve   func(w http.ResponseWriter)
		wantErr error
	}{
		{"not JSON", func(w http.ResponseWriter) { w.WriteHeader(200); _, _ = w.Write([]byte("ok")) }, ErrProtocol},
		{"no results", func(w http.ResponseWriter) { writeJSON(w, 200, map[string]any{}) }, ErrProtocol},
		{"413", func(w http.ResponseWriter) { writeJSON(w, 413, mbx.ErrorResponse{Error: "too large"}) }, ErrRefused},
		{"503", func(w http.ResponseWriter) { writeJSON(w, 503, mbx.ErrorResponse{Error: "retry"}) }, ErrStatus},
		{"401", func(w http.ResponseWriter) { writeJSON(w, 401, mbx.ErrorResponse{Error: "not enrolled"}) }, ErrNotEnrolled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.handle("POST /v2/relay/items", func(w http.ResponseWriter, _ *http.Request, _ []byte) { tc.serve(w) })
			res, err := f.client(t).Push(bg, one)
			if !errors.Is(err, tc.wantErr) || res != nil {
				t.Fatalf("got %v, %v; want no results and %v", res, err, tc.wantErr)
			}
		})
	}
}

func TestPushRefusesBadInput(t *testing.T) {
	f := newFake(t)
	c := f.client(t)
	tg := keyFor(t, 20).PublicKey()
	ok := PushTarget{HostPubkey: tg, Wire: []byte("w")}
	tests := []struct {
		name  string
		items []PushItem
	}{
		{"nothing", nil},
		{"expired kind", []PushItem{{Kind: mbx.ItemKindExpired, ItemID: "a", Targets: []PushTarget{ok}}}},
		{"no id", []PushItem{{Kind: mbx.ItemKindEnvelope, Targets: []PushTarget{ok}}}},
		{"same id twice", []PushItem{{Kind: "envelope", ItemID: "a", Targets: []PushTarget{ok}}, {Kind: "envelope", ItemID: "a", Targets: []PushTarget{ok}}}},
		{"no target", []PushItem{{Kind: mbx.ItemKindEnvelope, ItemID: "a"}}},
		{"repeated target", []PushItem{{Kind: mbx.ItemKindEnvelope, ItemID: "a", Targets: []PushTarget{ok, ok}}}},
		{"target by name", []PushItem{{Kind: mbx.ItemKindEnvelope, ItemID: "a", Targets: []PushTarget{{HostPubkey: "beta", Wire: []byte("w")}}}}},
		{"empty wire", []PushItem{{Kind: mbx.ItemKindEnvelope, ItemID: "a", Targets: []PushTarget{{HostPubkey: tg}}}}},
	}
	n := f.count()
	for _, tc := range tests {
		if _, err := c.Push(bg, tc.items); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}
	if f.count() != n {
		t.Fatalf("bad input sent %d requests", f.count()-n)
	}
}

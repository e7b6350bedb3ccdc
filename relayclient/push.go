package relayclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
)

// PushItem is one item to push: a kind (mbx.ItemKindEnvelope or mbx.ItemKindReceipt), its id, and
// for each target host (by pinned host key) the exact wire bytes sealed for it. Several addresses
// on one host are one target.
type PushItem struct {
	Kind    string
	ItemID  string
	Targets []PushTarget
}

// PushTarget is one target of a PushItem.
type PushTarget struct {
	HostPubkey string
	// Wire is the exact bytes persisted for the outbox row before the first attempt, reused on
	// every retry.
	Wire []byte
}

// Verdict is the fate of one item for one target in a push answer.
type Verdict uint8

// Verdicts. Only VerdictAccepted and VerdictDuplicate, which come with a verified statement, let
// an outbox row leave the active outbox; the others leave it pending (or rejected, by its code).
const (
	// VerdictAccepted: stored now, with a valid accept statement.
	VerdictAccepted Verdict = iota + 1
	// VerdictDuplicate: stored before with the same bytes, with a valid statement (the original
	// seq and acceptance time).
	VerdictDuplicate
	// VerdictRejected: the relay said rejected:<code> (TargetResult.Code).
	VerdictRejected
	// VerdictUnverified: the relay said accepted or duplicate, but without a statement that
	// verifies for this target (TargetResult.Err says why): not accepted.
	VerdictUnverified
	// VerdictMissing: the answer has no result for the item: not accepted.
	VerdictMissing
)

var verdictNames = [...]string{
	VerdictAccepted: "accepted", VerdictDuplicate: "duplicate", VerdictRejected: "rejected",
	VerdictUnverified: "unverified", VerdictMissing: "missing",
}

// String returns the verdict's name.
func (v Verdict) String() string {
	if v >= VerdictAccepted && v <= VerdictMissing {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// TargetResult is the fate of an item for one of its targets.
type TargetResult struct {
	HostPubkey string
	Verdict    Verdict
	// For an accepted or duplicate item: the statement's seq for this target, its epoch and
	// acceptance time, the statement itself, its canonical JSON (the bytes the relay signed,
	// to store with the row) and the relay's signature.
	Seq       int64
	Epoch     string
	At        time.Time
	Accept    mbx.Accept
	Statement []byte
	Sig       string
	// Code is the rejection code of VerdictRejected ("conflict", "quota:items", "rate", …).
	Code string
	// Err says why the target is not accepted (nil when it is).
	Err error
}

// Accepted reports whether the relay durably holds the item for this target, proven by a valid
// statement.
func (r TargetResult) Accepted() bool {
	return r.Verdict == VerdictAccepted || r.Verdict == VerdictDuplicate
}

// ItemResult is the fate of one pushed item, one TargetResult per target in the order pushed.
type ItemResult struct {
	ItemID  string
	Targets []TargetResult
}

// Push sends items (POST /v2/relay/items, at most the relay's max_batch) and checks the answer for
// every item and target: it is accepted only with a statement signed by the pinned relay key for
// this sender, this item id and this target, whose wire_hash is the hash of the exact bytes sent
// (mbx.ValidAccept). A 200 answer without such a statement, a rejected result or a missing one is
// not accepted. The error is for the whole request (no answer, an error status, an answer that is
// not a push answer): then nothing is known and every row stays pending.
//
// A statement signed by a relay key other than the pinned one stops the Client
// (ErrRelayKeyChanged); one that does not verify at all is only not accepted.
func (c *Client) Push(ctx context.Context, items []PushItem) ([]ItemResult, error) {
	req, hashes, err := pushRequest(items)
	if err != nil {
		return nil, fmt.Errorf("relayclient: push: %w", err)
	}
	body, err := mbx.MarshalJSON(req)
	if err != nil {
		return nil, fmt.Errorf("relayclient: push: %w", err)
	}
	a, err := c.do(ctx, request{op: "push", method: "POST", path: "/v2/relay/items", body: body, hop: true, retry: true, max: maxPushAnswer})
	if err != nil {
		return nil, err
	}
	var resp mbx.PushResponse
	if err := decode("push", a, &resp); err != nil {
		return nil, err
	}
	if resp.Results == nil {
		return nil, fmt.Errorf("relayclient: push: %w: no results", ErrProtocol)
	}
	own := c.key.PublicKey()
	used := make([]bool, len(resp.Results))
	out := make([]ItemResult, len(items))
	for i, it := range items {
		r, ok := findResult(resp.Results, used, i, it.ItemID)
		out[i] = ItemResult{ItemID: it.ItemID, Targets: make([]TargetResult, len(it.Targets))}
		for j, t := range it.Targets {
			tr := TargetResult{HostPubkey: t.HostPubkey}
			if !ok {
				tr.Verdict, tr.Err = VerdictMissing, ErrNoResult
			} else if err := c.judge(&tr, r, own, it.ItemID, hashes[i][j]); err != nil {
				return nil, err
			}
			out[i].Targets[j] = tr
		}
	}
	return out, nil
}

// judge fills tr from the result r. It returns an error only when the relay key changed.
func (c *Client) judge(tr *TargetResult, r mbx.PushResult, own, itemID, wireHash string) error {
	if code, rejected := r.Rejected(); rejected {
		tr.Verdict, tr.Code = VerdictRejected, clip(code, 200)
		tr.Err = fmt.Errorf("%w: rejected:%s", ErrRefused, tr.Code)
		return nil
	}
	acc, seq, err := mbx.ValidAccept(r, c.pin.RelayKey, own, itemID, tr.HostPubkey, wireHash)
	if err != nil {
		if errors.Is(err, mbx.ErrAcceptRelayKey) {
			var named struct {
				RelayPubkey string `json:"relay_pubkey"`
			}
			if json.Unmarshal(r.Accept, &named) == nil && mbx.ValidPublicKey(named.RelayPubkey) {
				if _, _, err2 := mbx.ValidAccept(r, named.RelayPubkey, own, itemID, tr.HostPubkey, wireHash); err2 == nil {
					return c.stop(named.RelayPubkey) // a self-consistent statement by another relay key
				}
			}
		}
		tr.Verdict, tr.Err = VerdictUnverified, err
		return nil
	}
	stmt, err := mbx.CanonicalJSON(r.Accept)
	if err != nil { // unreachable: ValidAccept canonicalized it
		tr.Verdict, tr.Err = VerdictUnverified, fmt.Errorf("%w: %v", mbx.ErrAcceptMalformed, err)
		return nil
	}
	if seq <= 0 || !validEpoch(acc.Epoch) || acc.AtTime().IsZero() {
		tr.Verdict, tr.Err = VerdictUnverified, fmt.Errorf("%w: seq, epoch or at unusable", mbx.ErrAcceptMalformed)
		return nil
	}
	tr.Verdict = VerdictAccepted
	if r.Status == mbx.StatusDuplicate {
		tr.Verdict = VerdictDuplicate
	}
	tr.Seq, tr.Epoch, tr.At, tr.Accept, tr.Statement, tr.Sig = seq, acc.Epoch, acc.AtTime(), acc, stmt, r.Sig
	return nil
}

// findResult returns the result for item i: results[i] when it names the item, else the first
// unused result that does.
func findResult(results []mbx.PushResult, used []bool, i int, itemID string) (mbx.PushResult, bool) {
	if i < len(results) && !used[i] && results[i].ItemID == itemID {
		used[i] = true
		return results[i], true
	}
	for k, r := range results {
		if !used[k] && r.ItemID == itemID {
			used[k] = true
			return r, true
		}
	}
	return mbx.PushResult{}, false
}

// pushRequest checks items and builds the request body and each target's wire hash.
func pushRequest(items []PushItem) (mbx.PushRequest, [][]string, error) {
	if len(items) == 0 {
		return mbx.PushRequest{}, nil, fmt.Errorf("%w: nothing to push", ErrInvalid)
	}
	req := mbx.PushRequest{Items: make([]mbx.PushItem, len(items))}
	hashes := make([][]string, len(items))
	ids := make(map[string]bool, len(items))
	for i, it := range items {
		switch {
		case it.Kind != mbx.ItemKindEnvelope && it.Kind != mbx.ItemKindReceipt:
			return mbx.PushRequest{}, nil, fmt.Errorf("%w: item %q: kind %q cannot be pushed", ErrInvalid, it.ItemID, it.Kind)
		case it.ItemID == "":
			return mbx.PushRequest{}, nil, fmt.Errorf("%w: item %d has no id", ErrInvalid, i)
		case ids[it.ItemID]:
			return mbx.PushRequest{}, nil, fmt.Errorf("%w: item %q twice in one push", ErrInvalid, it.ItemID)
		case len(it.Targets) == 0:
			return mbx.PushRequest{}, nil, fmt.Errorf("%w: item %q has no target", ErrInvalid, it.ItemID)
		}
		ids[it.ItemID] = true
		pi := mbx.PushItem{Kind: it.Kind, ItemID: it.ItemID, Targets: make([]mbx.PushTarget, len(it.Targets))}
		hashes[i] = make([]string, len(it.Targets))
		seen := make(map[string]bool, len(it.Targets))
		for j, t := range it.Targets {
			switch {
			case !mbx.ValidPublicKey(t.HostPubkey):
				return mbx.PushRequest{}, nil, fmt.Errorf("%w: item %q: target is not a host key", ErrInvalid, it.ItemID)
			case seen[t.HostPubkey]:
				return mbx.PushRequest{}, nil, fmt.Errorf("%w: item %q: target %s twice (merge addresses on one host)", ErrInvalid, it.ItemID, mbx.Fingerprint(t.HostPubkey))
			case len(t.Wire) == 0:
				return mbx.PushRequest{}, nil, fmt.Errorf("%w: item %q: empty wire for %s", ErrInvalid, it.ItemID, mbx.Fingerprint(t.HostPubkey))
			}
			seen[t.HostPubkey] = true
			pi.Targets[j] = mbx.PushTarget{HostPubkey: t.HostPubkey, WireB64: mbx.B64(t.Wire)}
			hashes[i][j] = mbx.WireHash(t.Wire)
		}
		req.Items[i] = pi
	}
	return req, hashes, nil
}

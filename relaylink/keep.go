package relaylink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/relayclient"
)

// The relay operations whose last failure a host records and shows.
const (
	OpInfo    = "info"
	OpEnrol   = "enrol"
	OpEncAd   = "enc-ad"
	OpSenders = "senders"
	OpPush    = "push"
	OpPull    = "pull"
)

// Enrolment is the enrolment cache (docs/design.md: Enrolment and publications): valid only for
// the relay, relay key, epoch and host key it names, never a permanent flag.
type Enrolment struct {
	URL      string `json:"url"`
	RelayKey string `json:"relay_pubkey"`
	Epoch    string `json:"epoch"`
	HostKey  string `json:"host_pubkey"`
	At       string `json:"at"`
}

// EncAd is the enc-key ad last published and confirmed.
type EncAd struct {
	Epoch  string `json:"epoch"`
	EncPub string `json:"enc_pub"`
	At     string `json:"at"`
	Exp    string `json:"exp"`
}

// Senders is the sender allowlist last published and confirmed.
type Senders struct {
	Epoch string `json:"epoch"`
	Hash  string `json:"hash"` // AllowList's hash of the keys
	Count int    `json:"count"`
	At    string `json:"at"`
}

// Published is what a host knows it has at a relay: the relay's limits, the enrolment cache and
// the publications last confirmed.
type Published struct {
	Limits   *mbx.Limits `json:"limits,omitempty"`
	Enrolled *Enrolment  `json:"enrolled,omitempty"`
	EncAd    *EncAd      `json:"enc_ad,omitempty"`
	Senders  *Senders    `json:"senders,omitempty"`
	// Account is the account the relay's info last named for this host ("" for none).
	Account string `json:"account,omitempty"`
}

// EnrolledFor reports whether e holds for the relay pin, epoch and host key.
func (e *Enrolment) EnrolledFor(pin relayclient.Pin, epoch, hostKey string) bool {
	return e != nil && e.URL == pin.URL && e.RelayKey == pin.RelayKey && e.Epoch == epoch && e.HostKey == hostKey
}

// AllowList is a sender allowlist of keys: sorted, without repeats, at most mbx.MaxSenders, and
// a hash that tells whether it changed.
func AllowList(keys []string) ([]string, string) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) > mbx.MaxSenders {
		keys = keys[:mbx.MaxSenders]
	}
	sum := sha256.Sum256([]byte(strings.Join(keys, "\n")))
	return keys, hex.EncodeToString(sum[:])
}

// Keeper brings a relay up to date with a host: the relay's info (its key checked by the client
// against the pin; its epoch; its limits; whether it knows the host key), then, when needed,
// enrolment, the v2 enc-key ad and the sender allowlist. A relay that forgot the host (no "you"
// in its info) or a new epoch means enrol again and republish both; the ad is republished every
// mbx.EncAdRefresh and whenever the relay holds none; the allowlist whenever the keys change.
// Every publication is checked: a refusal is recorded, never taken for success.
type Keeper struct {
	Client  *relayclient.Client
	Pin     relayclient.Pin
	HostKey string // this host's key
	EncPub  string // this host's enc key
	// Peers returns the keys the sender allowlist names (the pinned peers').
	Peers func() ([]string, error)
	Clock func() time.Time
	// Load returns what the host recorded for Pin (ok false when another relay, or none, is
	// pinned now); Save records it.
	Load func() (p Published, ok bool, err error)
	Save func(p Published) error
	// Problem records the outcome of an operation (err nil clears it) and returns err;
	// EpochSeen is told the epoch the relay's info named.
	// Proof returns the account token to enrol with ("" for none: the host-key challenge); it is
	// asked at each enrolment, so a token file another process refreshes is read again.
	Proof     func() (string, error)
	Problem   func(op string, err error) error
	EpochSeen func(epoch string)
	Logger    *slog.Logger
}

// Ran says what a Keeper run did.
type Ran struct {
	Enrolled    bool // it enrolled the host key
	Republished bool // it enrolled, or was forced: the publications were all sent again
}

// Run runs the enrolment and publications that are due; force (after the relay refused the
// host's hop) republishes everything. It enrols only when the relay's signed info names no caller
// (the relay does not know the key) or the cache is for another epoch: enrolling a key the relay
// knows cannot answer a refused hop. It returns the first failure; the others are recorded too.
func (k Keeper) Run(ctx context.Context, force bool) (ran Ran, err error) {
	info, err := k.Client.Info(ctx)
	if err != nil {
		return ran, k.Problem(OpInfo, err)
	}
	_ = k.Problem(OpInfo, nil) // clears it; nil back
	k.EpochSeen(info.Epoch)
	p, ok, err := k.Load()
	if err != nil || !ok {
		return ran, err // !ok: unpinned meanwhile
	}
	lim := info.Limits
	dirty := p.Limits == nil || *p.Limits != lim
	if info.You != nil && info.You.Account != p.Account {
		p.Account, dirty = info.You.Account, true
	}
	p.Limits = &lim
	now := k.Clock()

	enrol := info.You == nil || !p.Enrolled.EnrolledFor(k.Pin, info.Epoch, k.HostKey)
	republish := enrol || force
	if enrol {
		if err := k.enrol(ctx); err != nil {
			return ran, k.Problem(OpEnrol, err)
		}
		ran.Enrolled = true
		_ = k.Problem(OpEnrol, nil) // clears it; nil back
		// A pull refused before enrolment (401 not enrolled) is answered by this enrolment; a
		// pull that still fails records its problem again.
		k.Problem(OpPull, nil)
		p.Enrolled = &Enrolment{URL: k.Pin.URL, RelayKey: k.Pin.RelayKey, Epoch: info.Epoch, HostKey: k.HostKey, At: mbx.ISOTime(now)}
		if again, err := k.Client.Info(ctx); err == nil && again.You != nil && again.Epoch == info.Epoch {
			// The account the enrolment proved is named only in a signed info of the enrolled key.
			p.Account = again.You.Account
		}
		k.Logger.Info("enrolled at the relay", logkey.Relay, k.Pin.URL, logkey.Epoch, info.Epoch)
		if err := k.Save(p); err != nil {
			return ran, err
		}
	}
	var errs []error
	if k.adDue(p, info, republish, now) {
		pub, err := k.Client.PublishEncAd(ctx, k.EncPub, 0)
		if err != nil {
			errs = append(errs, k.Problem(OpEncAd, err))
		} else {
			k.Problem(OpEncAd, nil)
			p.EncAd = &EncAd{Epoch: info.Epoch, EncPub: k.EncPub, At: mbx.ISOTime(now), Exp: pub.Exp}
			dirty = true
			k.Logger.Info("enc-key ad published at the relay", logkey.Relay, k.Pin.URL, logkey.EncAdExp, pub.Exp)
		}
	}
	peers, err := k.Peers()
	if err != nil {
		return ran, err
	}
	keys, hash := AllowList(peers)
	if republish || p.Senders == nil || p.Senders.Epoch != info.Epoch || p.Senders.Hash != hash {
		if _, err := k.Client.PublishSenders(ctx, keys); err != nil {
			errs = append(errs, k.Problem(OpSenders, err))
		} else {
			k.Problem(OpSenders, nil)
			p.Senders = &Senders{Epoch: info.Epoch, Hash: hash, Count: len(keys), At: mbx.ISOTime(now)}
			dirty = true
			k.Logger.Info("sender allowlist published at the relay", logkey.Relay, k.Pin.URL, logkey.Senders, len(keys))
		}
	}
	if dirty {
		if err := k.Save(p); err != nil {
			return ran, err
		}
	}
	ran.Republished = republish
	return ran, errors.Join(errs...)
}

// adDue reports whether the enc-key ad must be published (again): when forced, when the cache
// names another epoch or key, when the relay's info says it holds no current v2 ad naming this
// host's enc key (only a relay older than 0.5.5 says nothing), and every mbx.EncAdRefresh.
func (k Keeper) adDue(p Published, info mbx.InfoResponse, republish bool, now time.Time) bool {
	ad := p.EncAd
	if republish || ad == nil || ad.Epoch != info.Epoch || ad.EncPub != k.EncPub ||
		(info.You != nil && info.You.EncAdServed && !info.You.EncAd.Holds(k.EncPub, now)) {
		return true
	}
	at, err := mbx.ParseISOTime(ad.At)
	return err != nil || !now.Before(at.Add(mbx.EncAdRefresh))
}

// enrol enrols the host key, with the account token when there is one.
func (k Keeper) enrol(ctx context.Context) error {
	proof := ""
	if k.Proof != nil {
		var err error
		if proof, err = k.Proof(); err != nil {
			return fmt.Errorf("account token: %w", err)
		}
	}
	return k.Client.Enrol(ctx, "", proof)
}

package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/agentmbx/agentmbx/internal/failpoint"
	"github.com/agentmbx/agentmbx/internal/logkey"
	"github.com/agentmbx/agentmbx/mbx"
)

// Failpoints of the Receiver (see package failpoint; MBX_FAILPOINT in crash tests).
const (
	// FailAfterCommitBeforeAck fires after a page's checkpoint committed, before the ack.
	FailAfterCommitBeforeAck = "checkpoint.after-commit-before-ack"
)

// Relay is the relay a Receiver pulls from. Its errors tell the Receiver what the relay answered
// by wrapping ErrEpochChanged, ErrRewound, ErrKeyChanged or ErrNotEnrolled, in a *RelayError
// that carries the relay's epoch and Retry-After; any other error is retried after a backoff.
type Relay interface {
	Pull(ctx context.Context, r PullRequest) (mbx.PullResponse, error)
	Ack(ctx context.Context, epoch string, through int64) (mbx.AckResponse, error)
}

// PullRequest asks a relay for the items after a receive position.
type PullRequest struct {
	// After is the receive position: items with a seq above it are wanted.
	After int64
	// Limit caps the page (0: the relay's max_pull).
	Limit int
	// Epoch is the epoch the position belongs to ("" before the first pull).
	Epoch string
	// Wait asks the relay to hold an empty answer until an item arrives or Wait passes.
	Wait time.Duration
}

// The relay answers a Receiver acts on (see Relay).
var (
	// ErrEpochChanged: the relay is in another epoch than the request named (RelayError.Epoch
	// says which, when it said): the position resets to 0.
	ErrEpochChanged = errors.New("relay epoch changed")
	// ErrRewound: the relay refused an ack through a seq it does not have (BAD_ACK): its store
	// went back, and the position resets to 0.
	ErrRewound = errors.New("relay store rewound")
	// ErrKeyChanged: the relay serves another key than the pinned one: Run ends.
	ErrKeyChanged = errors.New("relay key changed")
	// ErrNotEnrolled: the relay does not accept this host's hop: Reenrol is called.
	ErrNotEnrolled = errors.New("relay does not accept this host")
)

// RelayError is a Relay's failure: Kind is one of the errors above (nil for any other failure),
// Err the relay client's own error, Epoch the relay's current epoch (with ErrEpochChanged) and
// RetryAfter the pause the relay asked for (0: none).
type RelayError struct {
	Kind       error
	Err        error
	Epoch      string
	RetryAfter time.Duration
}

func (e *RelayError) Error() string { return e.Err.Error() }

// Unwrap returns Kind (when set) and Err, so errors.Is matches both.
func (e *RelayError) Unwrap() []error {
	if e.Kind == nil {
		return []error{e.Err}
	}
	return []error{e.Kind, e.Err}
}

// epochChanged reports whether err says the relay changed epoch, and the epoch it named.
func epochChanged(err error) (string, bool) {
	if !errors.Is(err, ErrEpochChanged) {
		return "", false
	}
	var re *RelayError
	if errors.As(err, &re) {
		return re.Epoch, true
	}
	return "", true
}

// Defaults of ReceiverOptions.
const (
	DefaultIdle       = 5 * time.Second
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 5 * time.Minute
)

// ReceiverOptions configure a Receiver. A nil *ReceiverOptions means all defaults.
type ReceiverOptions struct {
	// Limit caps a page (0: the relay's max_pull).
	Limit int
	// Wait is the long-poll wait of each pull (0: no long polling). A relay that holds an empty
	// answer for about Wait is pulled again at once; one that answers at once is treated as not
	// supporting it, and Idle applies.
	Wait time.Duration
	// Idle is the pause after a pull that brought nothing new, when not long-polling (default
	// DefaultIdle). Kick ends it early.
	Idle time.Duration
	// MinBackoff and MaxBackoff bound the pause after a failed step, doubling from the first to the
	// second, each jittered ±20% (defaults DefaultMinBackoff, DefaultMaxBackoff). A relay's
	// Retry-After is honoured.
	MinBackoff, MaxBackoff time.Duration
	// OnReset is called after a committed reset of the position (epoch change, rewind, BAD_ACK),
	// with the new position: the host re-pushes its relay-accepted rows for this relay
	// (docs/design.md: Epochs, restarts and restores).
	OnReset func(ctx context.Context, p Position)
	// Reenrol is called when the relay does not accept this host's hop (ErrNotEnrolled): the host
	// enrols again and republishes its enc-key ad and sender list (docs/design.md: Enrolment and
	// publications). The next step follows at once when it succeeds. nil: back off like any error.
	Reenrol func(ctx context.Context) error
	// Clock and Sleep are injected for tests (defaults: time.Now, and a timer that Kick and ctx
	// end early).
	Clock func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Logger receives failed steps (Warn) and resets (Warn). Default: the Store's logger.
	Logger *slog.Logger
}

// Receiver ties a relay, a Store and a Handler together for one relay: pull after the committed
// position, process the page, ack through what committed, repeat.
type Receiver struct {
	s     *Store
	relay string
	src   Relay
	h     Handler
	opt   ReceiverOptions
	log   *slog.Logger
	kick  chan struct{}

	// What this Receiver last acked (in memory: after a restart the first step acks again,
	// which the relay takes as a no-op).
	ackedEpoch string
	acked      int64
}

// NewReceiver returns a Receiver of the relay identified by relay (the same identifier the
// positions and the quarantine use, normally the relay's URL).
func (s *Store) NewReceiver(relay string, src Relay, h Handler, opts *ReceiverOptions) (*Receiver, error) {
	if err := checkRelay(relay); err != nil {
		return nil, fmt.Errorf("checkpoint: new receiver: %w", err)
	}
	if src == nil || h == nil {
		return nil, fmt.Errorf("checkpoint: new receiver: %w: nil relay or handler", ErrInvalid)
	}
	r := &Receiver{s: s, relay: relay, src: src, h: h, log: s.logger, kick: make(chan struct{}, 1)}
	if opts != nil {
		r.opt = *opts
	}
	o := &r.opt
	if o.Limit < 0 || o.Wait < 0 || o.Idle < 0 || o.MinBackoff < 0 || o.MaxBackoff < 0 {
		return nil, fmt.Errorf("checkpoint: new receiver: %w: negative option", ErrInvalid)
	}
	if o.Idle == 0 {
		o.Idle = DefaultIdle
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	o.MaxBackoff = max(o.MaxBackoff, o.MinBackoff)
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = r.sleep
	}
	if o.Logger != nil {
		r.log = o.Logger
	}
	return r, nil
}

// Kick ends the current idle pause or backoff, so the next pull starts now (the host calls it
// when it has reason to expect mail, e.g. after it re-enrolled).
func (r *Receiver) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// backoffJitter is the randomization of the pauses after failed steps (±20%), so that hosts that
// lost the same relay do not all pull again at the same moments.
const backoffJitter = 0.2

// backoff is the schedule of pauses after failed steps (github.com/cenkalti/backoff/v4): from
// MinBackoff, doubling up to MaxBackoff, each jittered by backoffJitter; it never gives up, and
// stops only with ctx.
func (r *Receiver) backoff(ctx context.Context) backoff.BackOff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(r.opt.MinBackoff),
		backoff.WithMaxInterval(r.opt.MaxBackoff),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(backoffJitter),
		backoff.WithMaxElapsedTime(0))
	return backoff.WithContext(b, ctx)
}

// RetryPause is the pause after a relay's retry hint h (capped at most): h to 2h, uniformly at
// random, so that hosts the relay turned away together (a full relay, a restart) come back spread
// over h rather than in one instant. relay bench --parked --restart paces its hosts with it.
func RetryPause(h, most time.Duration) time.Duration {
	h = min(h, most)
	return h + rand.N(h)
}

func (r *Receiver) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.kick:
		return nil
	case <-t.C:
		return nil
	}
}

// StepResult is what one Receiver step did.
type StepResult struct {
	// Result is ProcessPage's (zero when the pull failed or the position was reset before it).
	Result
	// Pulled is the number of items on the page.
	Pulled int
	// Acked is the seq acked in this step (0: none).
	Acked int64
	// AckErr is a failed ack: harmless (the next pull repeats what was not acked) and retried by
	// the next step.
	AckErr error
	// Waited reports that the relay held the pull for at least half the requested Wait.
	Waited bool
	// RetryAfter is the relay's hint on an empty page of a long poll it did not hold (it was
	// full, or shutting down): Run pauses that long or up to twice that, at random.
	RetryAfter time.Duration
}

// Step pulls one page after the committed position, processes it, and acks through the new
// received_through. Epoch changes (a 409, a page of another epoch), rewinds and BAD_ACK reset the
// position (OnReset is called); the next step then pulls from 0. A handler failure still acks what
// committed before it, and returns the error.
func (r *Receiver) Step(ctx context.Context) (StepResult, error) {
	pos, err := r.s.Position(ctx, r.relay)
	if err != nil {
		return StepResult{}, err
	}
	req := PullRequest{After: pos.ReceivedThrough, Limit: r.opt.Limit, Wait: r.opt.Wait}
	if pos.ReceivedThrough > 0 {
		req.Epoch = pos.Epoch // from 0 any epoch will do; a new one shows on the page
	}
	start := r.opt.Clock()
	page, err := r.src.Pull(ctx, req)
	if err != nil {
		if epoch, ok := epochChanged(err); ok {
			st := StepResult{}
			return st, r.reset(ctx, &st, epoch, ResetEpochChanged)
		}
		return StepResult{}, fmt.Errorf("checkpoint: pull from %s: %w", r.relay, err)
	}
	st := StepResult{Pulled: len(page.Items), Waited: r.opt.Wait > 0 && r.opt.Clock().Sub(start) >= r.opt.Wait/2,
		RetryAfter: page.RetryAfter}
	res, perr := r.s.ProcessPage(ctx, r.relay, req.After, page, r.h)
	if perr != nil && !errors.Is(perr, ErrHandler) {
		return st, perr
	}
	st.Result = res
	if err := failpoint.Inject(FailAfterCommitBeforeAck); err != nil {
		return st, err
	}
	if res.Reset != 0 {
		r.ackedEpoch, r.acked = "", 0
		if r.opt.OnReset != nil {
			r.opt.OnReset(ctx, res.Position)
		}
	}
	if err := r.ack(ctx, &st, res.Position); err != nil {
		return st, errors.Join(perr, err)
	}
	return st, perr
}

// ack acks through p.ReceivedThrough when that is news to the relay.
func (r *Receiver) ack(ctx context.Context, st *StepResult, p Position) error {
	if p.ReceivedThrough <= 0 || (p.Epoch == r.ackedEpoch && p.ReceivedThrough <= r.acked) {
		return nil
	}
	_, err := r.src.Ack(ctx, p.Epoch, p.ReceivedThrough)
	epoch, changed := epochChanged(err)
	switch {
	case err == nil:
		r.ackedEpoch, r.acked, st.Acked = p.Epoch, p.ReceivedThrough, p.ReceivedThrough
		return nil
	case errors.Is(err, ErrRewound):
		return r.reset(ctx, st, "", ResetBadAck)
	case changed:
		return r.reset(ctx, st, epoch, ResetEpochChanged)
	case errors.Is(err, ErrKeyChanged):
		return err
	default:
		st.AckErr = fmt.Errorf("checkpoint: ack %s through %d: %w", r.relay, p.ReceivedThrough, err)
		r.log.Warn("relay ack failed; the next pull repeats", logkey.Relay, r.relay, logkey.Through, p.ReceivedThrough, logkey.Err, err)
		return nil
	}
}

// reset resets the position because of why, records it in st and tells OnReset.
func (r *Receiver) reset(ctx context.Context, st *StepResult, epoch string, why ResetReason) error {
	if epoch != "" {
		if err := checkEpoch(epoch); err != nil {
			epoch = "" // the relay did not say usably; the next page says
		}
	}
	p, changed, err := r.s.Reset(context.WithoutCancel(ctx), r.relay, epoch, why)
	if err != nil {
		return err
	}
	r.ackedEpoch, r.acked = "", 0
	st.Position = p
	if changed {
		st.Reset = why
		if r.opt.OnReset != nil {
			r.opt.OnReset(ctx, p)
		}
	}
	return nil
}

// Run steps until ctx is done (it then returns ctx's error) or the relay key changes (it returns
// that error: relay use stops until the owner confirms the new key). It pulls again at once after
// a page that brought items (the relay may have more), after a reset and after a long poll the
// relay held; otherwise it pauses Idle. Failed steps are logged and retried after a backoff.
func (r *Receiver) Run(ctx context.Context) error {
	bo := r.backoff(ctx)
	reenrolled := false // once per failure streak: a relay that still refuses gets the backoff
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		st, err := r.Step(ctx)
		var pause time.Duration
		switch {
		case err == nil:
			bo.Reset()
			reenrolled = false
			// A page that moved nothing pauses, whatever its "more" says: a relay that keeps
			// saying more without items must not get a tight loop of pulls.
			if st.Reset == 0 && !st.Waited && st.Done() == 0 {
				pause = r.opt.Idle
				if st.RetryAfter > 0 {
					pause = RetryPause(st.RetryAfter, r.opt.MaxBackoff)
				}
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrKeyChanged):
			return err
		case errors.Is(err, ErrNotEnrolled) && r.opt.Reenrol != nil && !reenrolled:
			reenrolled = true
			rerr := r.opt.Reenrol(ctx)
			if rerr == nil {
				r.log.Info("pull refused by the relay: enrolment renewed or found current, pulling again", logkey.Relay, r.relay)
				continue
			}
			err = errors.Join(err, rerr)
			fallthrough
		default:
			if pause = bo.NextBackOff(); pause == backoff.Stop {
				return ctx.Err()
			}
			var re *RelayError
			if errors.As(err, &re) && re.RetryAfter > pause {
				pause = re.RetryAfter
			}
			r.log.Warn("relay receive step failed", logkey.Relay, r.relay, logkey.RetryIn, pause, logkey.Err, err)
		}
		if pause > 0 {
			if err := r.opt.Sleep(ctx, pause); err != nil {
				return err
			}
		}
	}
}

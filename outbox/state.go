package outbox

import "fmt"

// State is where a row is in its life. The zero State is not valid.
//
// The order of the constants is the forward order of transitions:
//
//	pending → relay-accepted → expired | unconfirmed | rejected → done
//
// pending and relay-accepted are active; the other four are ended. done is the only state
// nothing leaves. expired, unconfirmed and rejected end a row without a delivery confirmation;
// a delivery receipt that arrives later still moves such a row to done (Tx.Settle), because the
// mail did arrive after all.
type State uint8

// States of a row.
const (
	// StatePending: not yet accepted by anyone; the row is sent whenever it is due.
	StatePending State = iota + 1
	// StateRelayAccepted: the relay signed that it durably stored the item. The row waits for the
	// target's delivery receipt and is not sent again unless an epoch change asks for a re-push.
	StateRelayAccepted
	// StateExpired: a pending row was not delivered within the LAN deadline (72 h), or the relay
	// reported that the item expired in its queue.
	StateExpired
	// StateUnconfirmed: a relay-accepted row got no delivery receipt by its deadline
	// (accepted_at + retention + 24 h).
	StateUnconfirmed
	// StateRejected: the peer or the relay refused the item in a way retrying cannot fix.
	StateRejected
	// StateDone: delivered (LAN success, or a delivery receipt from the target host).
	StateDone
)

var stateNames = [...]string{
	StatePending:       "pending",
	StateRelayAccepted: "relay-accepted",
	StateExpired:       "expired",
	StateUnconfirmed:   "unconfirmed",
	StateRejected:      "rejected",
	StateDone:          "done",
}

// String returns the state's wire name ("pending", "relay-accepted", …).
func (s State) String() string {
	if s.valid() {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

func (s State) valid() bool { return s >= StatePending && s <= StateDone }

// Active reports whether the row still waits for something (pending or relay-accepted).
func (s State) Active() bool { return s == StatePending || s == StateRelayAccepted }

// Ended reports whether the row is in one of the four ended states.
func (s State) Ended() bool { return s.valid() && !s.Active() }

// MarshalText implements encoding.TextMarshaler.
func (s State) MarshalText() ([]byte, error) {
	if !s.valid() {
		return nil, fmt.Errorf("%w: state %d", ErrInvalid, uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *State) UnmarshalText(b []byte) error {
	v, err := ParseState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseState reads a state's wire name.
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if n != "" && n == name {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown state %q", ErrInvalid, name)
}

// Kind is what a row carries. The zero Kind is not valid.
type Kind uint8

// Kinds of rows.
const (
	// KindEnvelope: a sealed envelope v3 for one target host; item id = message id.
	KindEnvelope Kind = iota + 1
	// KindReceipt: a delivery receipt (canonical {rec, sig}) for the host that sent a message;
	// item id = "receipt:<msg>:<recipient>:<seq>". Receipts are advisory: they never alert.
	KindReceipt
)

var kindNames = [...]string{KindEnvelope: "envelope", KindReceipt: "receipt"}

// String returns "envelope" or "receipt".
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

func (k Kind) valid() bool { return k == KindEnvelope || k == KindReceipt }

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) {
	if !k.valid() {
		return nil, fmt.Errorf("%w: kind %d", ErrInvalid, uint8(k))
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Kind) UnmarshalText(b []byte) error {
	switch string(b) {
	case "envelope":
		*k = KindEnvelope
	case "receipt":
		*k = KindReceipt
	default:
		return fmt.Errorf("%w: unknown kind %q", ErrInvalid, b)
	}
	return nil
}

// Transport is the way a row was last sent, or is to be sent next. The zero Transport means
// "not chosen yet" and prints as "".
type Transport uint8

// Transports.
const (
	// TransportNone: no attempt yet and no preference given.
	TransportNone Transport = iota
	// TransportLAN: host to host over the LAN (signed LAN hop).
	TransportLAN
	// TransportRelay: through the relay v2 API.
	TransportRelay
)

var transportNames = [...]string{TransportNone: "", TransportLAN: "lan", TransportRelay: "relay"}

// String returns "lan", "relay" or "".
func (t Transport) String() string {
	if t <= TransportRelay {
		return transportNames[t]
	}
	return fmt.Sprintf("Transport(%d)", uint8(t))
}

// MarshalText implements encoding.TextMarshaler.
func (t Transport) MarshalText() ([]byte, error) {
	if t > TransportRelay {
		return nil, fmt.Errorf("%w: transport %d", ErrInvalid, uint8(t))
	}
	return []byte(transportNames[t]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *Transport) UnmarshalText(b []byte) error {
	switch string(b) {
	case "":
		*t = TransportNone
	case "lan":
		*t = TransportLAN
	case "relay":
		*t = TransportRelay
	default:
		return fmt.Errorf("%w: unknown transport %q", ErrInvalid, b)
	}
	return nil
}

package quarantine

import "fmt"

// Cause is the class of a rejection. The zero Cause is not valid.
type Cause uint8

// Causes of a rejection. Only CauseUnpaired is retried by the package (Tx.Release); the others
// are final unless the owner acts.
const (
	// CauseMalformed: the item or its wire bytes do not parse (bad base64, bad JSON, bad shape).
	CauseMalformed Cause = iota + 1
	// CauseUnknownKind: the item's kind is not one this host handles.
	CauseUnknownKind
	// CauseBadSignature: a signature (envelope, receipt, notice) does not verify.
	CauseBadSignature
	// CauseUndecryptable: the sealed body opens with none of this host's enc keys.
	CauseUndecryptable
	// CauseUnpaired: the sender is not a paired host (yet). Retried once it is.
	CauseUnpaired
	// CauseRefused: well-formed and authentic, but refused by a rule of this host (a receipt
	// for a message it did not send to that host, a recipient it does not have, …).
	CauseRefused
)

var causeNames = [...]string{
	CauseMalformed:     "malformed",
	CauseUnknownKind:   "unknown-kind",
	CauseBadSignature:  "bad-signature",
	CauseUndecryptable: "undecryptable",
	CauseUnpaired:      "unpaired",
	CauseRefused:       "refused",
}

// String returns the cause's wire name ("malformed", "unpaired", …).
func (c Cause) String() string {
	if c.Valid() {
		return causeNames[c]
	}
	return fmt.Sprintf("Cause(%d)", uint8(c))
}

// Valid reports whether c is one of the defined causes.
func (c Cause) Valid() bool { return c >= CauseMalformed && c <= CauseRefused }

// MarshalText implements encoding.TextMarshaler.
func (c Cause) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("%w: cause %d", ErrInvalid, uint8(c))
	}
	return []byte(causeNames[c]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (c *Cause) UnmarshalText(b []byte) error {
	v, err := ParseCause(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// ParseCause reads a cause's wire name.
func ParseCause(name string) (Cause, error) {
	for i, n := range causeNames {
		if n != "" && n == name {
			return Cause(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown cause %q", ErrInvalid, name)
}

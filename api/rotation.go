package api

// Rotation is the progress of this host's last host key rotation (`agentmbx id rotate`).
type Rotation struct {
	OldFingerprint string         `json:"old_fingerprint"`
	NewFingerprint string         `json:"new_fingerprint"`
	Started        string         `json:"started"`
	Done           string         `json:"done,omitempty"` // "" while steps remain
	Relay          *RotationRelay `json:"relay,omitempty"`
	Peers          []RotationPeer `json:"peers"`
}

// RotationRelay is the rotation's progress at the relay pinned when it started. Each step is the
// time it was done ("" while it is not).
type RotationRelay struct {
	URL       string `json:"url"`
	Noticed   string `json:"noticed,omitempty"` // rotation notices for the peers accepted
	Rotated   string `json:"rotated,omitempty"` // the relay moved the queue (Moved items)
	Moved     int64  `json:"moved"`
	Reset     string `json:"reset,omitempty"`   // receive position reset to 0
	Checked   string `json:"checked,omitempty"` // enrolment, enc-key ad and allowlist confirmed
	Note      string `json:"note,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// RotationPeer is how a paired peer learnt (or is to learn) of the rotation.
type RotationPeer struct {
	Host      string `json:"host"`
	LAN       string `json:"lan,omitempty"`    // "applied", "had it", "refused: …"
	Notice    string `json:"notice,omitempty"` // relay notice: "accepted", "duplicate", "rejected: …"
	LastError string `json:"last_error,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`
}

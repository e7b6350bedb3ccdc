package relayserver

// Test hooks for the external test package.

// RateTableLen is the number of client addresses the enrolment rate table remembers.
func (s *Server) RateTableLen() int { return s.enrolR.len() }

// ParkedPulls is the number of long polls parked now.
func (s *Server) ParkedPulls() int { return s.polls.len() }

// ParseWait is parseWait, for its table test.
var ParseWait = parseWait

// CheckEnvelopeWire is checkEnvelopeWire, for its fuzz test.
var CheckEnvelopeWire = checkEnvelopeWire

// BodyBytesInFlight is what the relay's body budget holds now.
func (s *Server) BodyBytesInFlight() int64 { return s.budget.InUse() }

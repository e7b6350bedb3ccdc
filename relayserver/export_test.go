package relayserver

// Test hooks for the external test package.

// PendingChallenges is the number of open enrolment challenges.
func (s *Server) PendingChallenges() int { return s.chal.len() }

// RateTableLen is the number of client addresses the enrolment rate table remembers.
func (s *Server) RateTableLen() int { return s.enrolR.len() }

// ParkedPulls is the number of long polls parked now.
func (s *Server) ParkedPulls() int { return s.polls.len() }

// ParseWait is parseWait, for its table test.
var ParseWait = parseWait

// CheckEnvelopeWire is checkEnvelopeWire, for its fuzz test.
var CheckEnvelopeWire = checkEnvelopeWire

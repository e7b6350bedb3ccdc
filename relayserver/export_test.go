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

// RequestsInFlight is the number of requests with a body the client address key (an IPv4
// address, an IPv6 /64) has in flight.
func (s *Server) RequestsInFlight(key string) int {
	s.inflight.mu.Lock()
	defer s.inflight.mu.Unlock()
	return s.inflight.m[key]
}

// BodyShareInFlight is what the requests of a share of the body budget hold now: "addr " and
// an address (or an IPv6 prefix), or "key " and a host key.
func (s *Server) BodyShareInFlight(share string) int64 { return s.budget.ShareInUse(share) }

// PullsInFlight is the number of pull answers being written now.
func (s *Server) PullsInFlight() int { return s.pulls.len() }

// PullsEnded is the number of pull answers a newer pull of their key ended.
func (s *Server) PullsEnded() int64 { return s.pulls.endedCount() }

// ResponseBytesInFlight is what the relay's response budget holds now.
func (s *Server) ResponseBytesInFlight() int64 { return s.respBudget.InUse() }

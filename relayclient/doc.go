// Package relayclient will be the host's relay v2 HTTP client: info and key pinning, enrolment,
// enc-key ads, sender allowlists, rotation, push with accept-statement verification, pull and ack.
// Not built yet (issue: host ↔ relay); see the README.
package relayclient

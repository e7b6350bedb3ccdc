package relaylink

import "testing"

// The relay's relay-wide refusal (rejected:quota:relay) and a rotated target (rejected:target
// revoked) are retryable: the row stays and is sent again later, up to its own deadline.
func TestRelayWideQuotaIsRetryable(t *testing.T) {
	for _, code := range []string{"quota:relay", "quota:queue_items", "rate", "target revoked"} {
		if !RetryableRejection(code) {
			t.Errorf("%s is not retryable", code)
		}
	}
	for _, code := range []string{"conflict", "bad envelope", "target revokedx", ""} {
		if RetryableRejection(code) {
			t.Errorf("%q is retryable", code)
		}
	}
}

package relaylink

import "testing"

// The relay's relay-wide refusal (rejected:quota:relay, issue 9) is retryable: the row stays
// and is sent again later.
func TestRelayWideQuotaIsRetryable(t *testing.T) {
	for _, code := range []string{"quota:relay", "quota:queue_items", "rate"} {
		if !RetryableRejection(code) {
			t.Errorf("%s is not retryable", code)
		}
	}
	if RetryableRejection("conflict") {
		t.Error("conflict is retryable")
	}
}

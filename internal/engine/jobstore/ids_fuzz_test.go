package jobstore

import (
	"regexp"
	"testing"
	"time"
)

// ValidJobID says what JobIDPattern (the API's description of an id) says, for any string.
func FuzzValidJobIDAgreesWithItsPattern(f *testing.F) {
	pattern := regexp.MustCompile(JobIDPattern)
	for _, seed := range []string{
		NewJobID("r", time.Now()), "", "-", "0123456789abcdef-0123456789abcdef0123456789ab",
		"0123456789abcdef-0123456789abcdef0123456789aB", "0123456789abcdef-0123456789abcdef0123456789a",
		"0123456789abcdef-0123456789abcdef0123456789abc", "0123456789abcdef00123456789abcdef0123456789ab",
		"0123456789abcde-f0123456789abcdef0123456789ab", "0123456789abcdef-0123456789abcdef0123456789a\n",
		"0123456789abcdef-0123456789abcdef0123456789a\u00e9", "g123456789abcdef-0123456789abcdef0123456789ab",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := ValidJobID(id), pattern.MatchString(id); got != want {
			t.Fatalf("ValidJobID(%q) = %v, the pattern says %v", id, got, want)
		}
	})
}

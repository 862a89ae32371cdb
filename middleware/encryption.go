package middleware

import (
	"fmt"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/seal"
)

// KeyRing holds the keys that encrypt the payloads, results and checkpoints of job-level types
// marked Job.Encrypt, at rest in Redis (AES-256-GCM). The first key encrypts; every key
// decrypts what it encrypted, so a key is rotated by putting a new one first, running the
// re-encrypt command (Guard.Reencrypt), then dropping the old one. Key material is never printed:
// String and every fmt verb show the key ids only, and no error quotes a key.
type KeyRing struct{ r *seal.Ring }

// ParseKeyRing reads "id1:base64key,id0:base64key" (ids 1-32 of [A-Za-z0-9._-], keys 32 bytes in
// standard base64; commas or newlines between entries): the first entry is the current key.
func ParseKeyRing(spec string) (*KeyRing, error) {
	r, err := seal.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("middleware: key ring: %w", err)
	}
	return &KeyRing{r: r}, nil
}

// ReadKeyRingFile reads a key ring from a file in ParseKeyRing's format (one entry a line; blank
// lines and lines starting with '#' skipped).
func ReadKeyRingFile(path string) (*KeyRing, error) {
	r, err := seal.ParseFile(path)
	if err != nil {
		return nil, fmt.Errorf("middleware: key ring file: %w", err)
	}
	return &KeyRing{r: r}, nil
}

// Current is the id of the key that encrypts.
func (k *KeyRing) Current() string { return k.ring().Current() }

// IDs are the ring's key ids, the current one first.
func (k *KeyRing) IDs() []string { return k.ring().IDs() }

// String shows the key ids only.
func (k *KeyRing) String() string { return "middleware.KeyRing" + fmt.Sprint(k.IDs()) }

// Format shows the key ids only, whatever the verb.
func (k *KeyRing) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

func (k *KeyRing) ring() *seal.Ring {
	if k == nil {
		return nil
	}
	return k.r
}

// ErrUndecryptable: a job's data is encrypted and does not open with the guard's keys (the key
// that encrypted it is not in the ring, or the data was changed). A run that meets it fails for
// good with this reason; Status returns it.
var ErrUndecryptable = engine.ErrUndecryptable
